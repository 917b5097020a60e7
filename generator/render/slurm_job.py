"""The job script of a stack under the slurm runtime (``compose/<stack>/job.sbatch``): what
`up --runtime slurm` asks the cluster for, as #SBATCH lines, then `up` inside the job and the
smoke verdict as its last step, for users who submit it themselves (sbatch)."""

from __future__ import annotations

from pathlib import Path

from generator.paths import Workspace
from generator.plan import Plan
from generator.render.jinja import render_template
from generator.slurm import job_name, job_request

__all__ = ["JOB_SCRIPT", "job_script"]

JOB_SCRIPT = "job.sbatch"


def job_script(plan: Plan, workspace: Workspace) -> str:
    # Where sbatch is run (the checkout): the folder for it need not exist before the job.
    output = Path(f"slurm-{job_name(plan.stack)}-%j.out")
    request = job_request(plan, output)
    return render_template(
        workspace.templates_dir,
        "slurm-job.sbatch.j2",
        stack=plan.stack,
        options=request.sbatch_options(),
        nodes=request.nodes,
        gpus=request.gpus_per_node,
        time_limit_min=request.time_limit_min,
        container=plan.slurm.container if plan.slurm else None,
    )
