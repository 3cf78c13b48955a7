"""What the generated markdown pages share: a table's head, and the machine a page names."""

import os
import subprocess


def table_head(*columns):
    """A markdown table's header and separator lines for `columns`."""
    return ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def machine():
    """This machine's CPU model (lscpu's, "unknown" without it) and core count."""
    model, cores = "unknown", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
    except OSError:
        pass
    return model, cores
