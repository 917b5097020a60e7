"""Running stacks: an in-process, Airflow-style task graph (tasks, graph, runner, records)."""

from generator.workflow.run import dag_of, up_stack

__all__ = ["dag_of", "up_stack"]
