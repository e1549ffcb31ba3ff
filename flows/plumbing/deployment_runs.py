"""The deployments on a Prefect server with their last flow run, for `odqa deployments` (what
`prefect deployment ls` would show, had Prefect 3.8.8's own command not failed with HTTP 422 on
the 3.8.8 server, plus each deployment's schedule and latest run)."""

from __future__ import annotations

from typing import Any


async def deployments_with_last_runs(api_url: str) -> list[dict[str, Any]]:
    """One row per deployment, by name: deployment, schedule, next scheduled run, last run (the
    latest that started), its state and start."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowFilter,
        FlowFilterId,
        FlowRunFilter,
        FlowRunFilterStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import DeploymentSort, FlowRunSort, FlowSort

    from ..backend.auth import api_client
    from .prefect_fixes import drop_null_filter_fields

    drop_null_filter_fields()
    rows = []
    async with api_client(api_url) as client:
        deployments = await client.read_deployments(limit=200, offset=0, sort=DeploymentSort.NAME_ASC)
        flows = await client.read_flows(flow_filter=FlowFilter(id=FlowFilterId(any_=[d.flow_id for d in deployments])),
                                        limit=200, offset=0, sort=FlowSort.NAME_ASC)  # fmt: skip
        flow_names = {flow.id: flow.name for flow in flows}
        for deployment in deployments:
            of_deployment = DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
            started = await client.read_flow_runs(
                deployment_filter=of_deployment, sort=FlowRunSort.START_TIME_DESC, limit=1, offset=0,
                flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(is_null_=False)),
            )  # fmt: skip
            scheduled = await client.read_flow_runs(
                deployment_filter=of_deployment, sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=1, offset=0,
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
            )  # fmt: skip
            last = started[0] if started else None
            upcoming = scheduled[0].expected_start_time if scheduled else None
            schedules = [s.schedule for s in deployment.schedules if s.active]
            rows.append({
                "deployment": f"{flow_names.get(deployment.flow_id, '?')}/{deployment.name}",
                "schedule": ", ".join(getattr(s, "cron", None) or str(s) for s in schedules) or "-",
                "next run": upcoming.strftime("%Y-%m-%d %H:%M %Z") if upcoming else "-",
                "last run": last.name if last else "-",
                "state": last.state_name if last else "-",
                "started": last.start_time.strftime("%Y-%m-%d %H:%M:%S") if last and last.start_time else "-",
            })  # fmt: skip
    return rows
