"""URLs of the typed-memory and proposal APIs (mounted under /api/v1/ by smartmemory_site.urls)."""

from __future__ import annotations

from django.urls import path

from evolution import api_proposals, api_typed

urlpatterns = [
    path("workspaces/<slug:ws>/contradictions/", api_typed.ContradictionListApi.as_view(), name="contradictions"),
    path("workspaces/<slug:ws>/drift-flags/", api_typed.DriftFlagListApi.as_view(), name="drift-flags"),
    path(
        "workspaces/<slug:ws>/goals/<str:goal_id>/resolution/revert/",
        api_typed.GoalResolutionRevertApi.as_view(),
        name="goal-resolution-revert",
    ),
    path("workspaces/<slug:ws>/proposals/", api_proposals.ProposalListApi.as_view(), name="proposals"),
    path(
        "workspaces/<slug:ws>/proposals/<str:proposal_id>/",
        api_proposals.ProposalDetailApi.as_view(),
        name="proposal",
    ),
    path(
        "workspaces/<slug:ws>/proposals/<str:proposal_id>/approve/",
        api_proposals.ProposalApproveApi.as_view(),
        name="proposal-approve",
    ),
    path(
        "workspaces/<slug:ws>/proposals/<str:proposal_id>/reject/",
        api_proposals.ProposalRejectApi.as_view(),
        name="proposal-reject",
    ),
]
