from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "memories"
    verbose_name = "Memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # history.revert undoes memory and edge changes through this app's handler.
        from memories import revert

        revert.register()

        # Open sockets of a workspace check their member again when its memberships change (admin
        # included, which writes memberships without a service).
        from django.db import transaction
        from django.db.models.signals import post_delete, post_save

        from memories import live
        from memories.models import Membership

        def announce(sender: type[Membership], instance: Membership, **kwargs: object) -> None:
            workspace_id = instance.workspace_id
            transaction.on_commit(lambda: live.access_changed(workspace_id), robust=True)

        post_save.connect(announce, sender=Membership, weak=False, dispatch_uid="memories.access_changed.save")
        post_delete.connect(announce, sender=Membership, weak=False, dispatch_uid="memories.access_changed.delete")

        # A PostgreSQL connection waits DATABASE_LOCK_TIMEOUT_SECONDS for a lock, then a request answers 503.
        from django.db.backends.signals import connection_created

        from core.db_locks import lock_timeout_on_connect

        connection_created.connect(lock_timeout_on_connect, dispatch_uid="core.db_locks.lock_timeout")
