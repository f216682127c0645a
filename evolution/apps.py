from __future__ import annotations

from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evolution"
    verbose_name = "Evolution"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every path that creates memories runs the typed slot policies inside its own transaction.
        from evolution.policies import write_policy_hook
        from memories.services import register_write_policy

        register_write_policy(write_policy_hook)
        # Once those rows commit, the write-time evolve stage (evolution.evolve_stage) runs.
        from evolution.evolve_stage import evolve_stage
        from memories.services import register_ingest_stage

        register_ingest_stage(evolve_stage)
        # A bulk write that left its vectors to the embed job wakes this process's worker to embed them.
        from evolution.jobs import embed_job_wanted
        from memories.embedding_service import add_deferred_listener

        add_deferred_listener(embed_job_wanted)

        # The engine registers what approving and rejecting a strategy proposal does; evolution.merges and
        # evolution.dream_proposals what approving a merge, a reflection or a promotion does; evolution.forgetting
        # what approving a forget proposal does (and registers its policy settings).
        import evolution.dream_proposals
        import evolution.engine
        import evolution.forgetting
        import evolution.jobs  # registers the cycle schedule setting
        import evolution.merges  # noqa: F401
