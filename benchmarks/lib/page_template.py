"""Pages rendered from results: a template under benchmarks/templates/ holds a page's prose, and
`${name}` placeholders take the numbers and tables computed from results files
(`string.Template.substitute`, so a value the code does not give fails loudly). What the
planning pages (docs/planning.md, docs/cluster_study.md, docs/properties.md) share."""

from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def render(name, values):
    """The template `name` (a file under benchmarks/templates/) with `values` put in."""
    return Template((TEMPLATES / name).read_text()).substitute(values)


def lines(rows):
    """Table or list lines as one placeholder's text."""
    return "\n".join(rows)


def pct(fraction, digits=1):
    """A fraction as a percentage: 0.0861 -> "8.6%"."""
    return "%.*f%%" % (digits, 100 * fraction)


def steps_text(steps):
    """Step indices as the pages list them: "steps [2, 4]", or "no step"."""
    return "steps %s" % list(steps) if steps else "no step"


def case_values(case, prefix=""):
    """A run's settings as placeholders (`prefix` + name): the keys of `case` it has among
    distribution, batch, hardware, model, stages, steps, and its memory and seeds."""
    out = {
        k: case[k] for k in ("distribution", "batch", "hardware", "model", "stages") if k in case
    }
    out["memory_gib"] = "%g" % case["memory_gib"]
    out["steps"] = case["steps"]
    out["first_seed"], out["last_seed"] = case["seed"], case["seed"] + case["steps"] - 1
    return {prefix + k: v for k, v in out.items()}
