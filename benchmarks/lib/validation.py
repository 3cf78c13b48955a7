"""The simulator validation's errors, predicted / measured - 1: what validate_simulator prints and
report.py renders from its results."""

import statistics


def errors(row):
    """A validation case's errors: of the step time (against the median measured step), and per
    stage of the activation peak and of the busy (compute) time."""
    return dict(
        step=row["predicted_step_s"] / statistics.median(row["measured_step_s"]) - 1,
        memory=[
            p / m - 1
            for p, m in zip(row["predicted_activation_bytes"], row["measured_activation_bytes"])
        ],
        busy=[p / m - 1 for p, m in zip(row["predicted_busy_s"], row["measured_busy_s"])],
    )
