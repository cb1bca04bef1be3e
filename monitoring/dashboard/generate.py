"""The Grafana dashboard of booking-expire as code: writes monitoring/grafana-dashboard.json.

Built with Grafana's Foundation SDK (grafana-foundation-sdk, the version pinned in
scripts/dashboard.sh, which runs this file in a venv of its own):

    scripts/dashboard.sh          regenerate monitoring/grafana-dashboard.json
    scripts/dashboard.sh --check  fail when the committed file differs (scripts/test.sh)

Every query selects `job=~"$job"` and the step that pushes the metric (`sel`); the
metrics it names must be ones the job pushes (tests/it/dashboard.rs) and every query must
return data from a real Prometheus (tests/it/prometheus.rs).
"""

import argparse
import difflib
import pathlib
import sys

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import prometheus
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

OUTPUT = pathlib.Path(__file__).resolve().parents[1] / "grafana-dashboard.json"
REGENERATE = "scripts/dashboard.sh"

DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
RUN_ONCE = "run-once"
RELAY = "relay-outbox"


def sel(metric: str, step: str | None = None) -> str:
    """A series selector of this job's metric, for the jobs chosen and one step."""
    matchers = ['job=~"$job"'] + ([f'step="{step}"'] if step else [])
    return f"crm_booking_expiration_{metric}{{{', '.join(matchers)}}}"


def query(ref_id: str, expr: str, legend: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .expr(expr)
        .legend_format(legend)
        .interval("1m")
    )


def panel(
    panel_id: int, title: str, description: str, unit: str, queries: list, width: int = 12
) -> timeseries.Panel:
    """A time series panel of the standard size, on the data source variable."""
    p = (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(width)
        .unit(unit)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.NONE)
        )
    )
    for q in queries:
        p = p.with_target(q)
    return p


def p_quantile(q: float, by: str, bucket: str, step: str, window: str) -> str:
    """A quantile over the runs of a window: each push replaces the last run's
    histogram, so its buckets are summed over time, never rated (docs/design.md)."""
    return (
        f"histogram_quantile({q}, sum by ({by}) "
        f"(sum_over_time({sel(bucket, step)}[{window}])))"
    )


def build() -> builders.Dashboard:
    job = (
        builders.QueryVariable("job")
        .label("Job")
        .datasource(DATASOURCE)
        .query(
            {
                "query": "label_values(crm_booking_expiration_errors, job)",
                "refId": "job-var",
            }
        )
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".+")
        .current(models.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )
    datasource = (
        builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
    )
    lateness = panel(
        11,
        "Lateness after the deadline",
        "How late bookings expired (expired_at - deadline) per phase: the 99th percentile "
        "over the expiries of the last 15 minutes' runs, which the alert "
        "BookingExpirationLate compares with the objective of 85 s (60 s + the cycle's "
        "25 s budget), and the mean of the last run's expiries.",
        "s",
        [
            query(
                "A",
                p_quantile(0.99, "phase, le", "lateness_seconds_bucket", RUN_ONCE, "15m"),
                "p99 {{phase}} over 15m",
            ),
            query(
                "B",
                f"sum by (phase) ({sel('lateness_seconds_sum', RUN_ONCE)}) / "
                f"sum by (phase) ({sel('lateness_seconds_count', RUN_ONCE)})",
                "mean {{phase}}, last run",
            ),
        ],
        width=24,
    )
    # The objective of the alert BookingExpirationLate, drawn as a line.
    lateness = lateness.thresholds(
        builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                models.Threshold(value=None, color="green"),
                models.Threshold(value=85, color="red"),
            ]
        )
    ).thresholds_style(
        common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)
    )

    return (
        builders.Dashboard("pin-crm / Background jobs: booking expiration")
        .uid("pin-crm-booking-expiration")
        .description(
            "booking-expire (run-once, relay-outbox): the metrics each run pushes to the "
            "Pushgateway. See docs/design.md, Observability."
        )
        .tags(["pin-crm", "background-jobs", "booking-expiration"])
        .timezone("utc")
        .readonly()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("1m")
        .version(1)
        .with_variable(datasource)
        .with_variable(job)
        .with_row(builders.Row("Background jobs").id(1))
        .with_panel(
            panel(
                3,
                "Cycle outcomes",
                "Per step: 1 when the last run failed; seconds since the last successful "
                "run (alerts at 300 s).",
                "short",
                [
                    query("A", f"max by (step) ({sel('errors')})", "failed {{step}}"),
                    query(
                        "B",
                        f"time() - max by (step) ({sel('last_success_timestamp_seconds')})",
                        "since success {{step}}",
                    ),
                ],
            )
        )
        .with_panel(
            panel(
                4,
                "Expiries per phase",
                "Bookings the last run-once expired, per phase.",
                "short",
                [query("A", f"sum by (phase) ({sel('items', RUN_ONCE)})", "{{phase}}")],
            )
        )
        .with_panel(
            panel(
                5,
                "Backlog and its age",
                "Overdue active bookings left after the cycle, and the age of the oldest, "
                "per phase (alert: more than 100 for 5 min).",
                "short",
                [
                    query("A", f"sum by (phase) ({sel('backlog', RUN_ONCE)})", "overdue {{phase}}"),
                    query(
                        "B",
                        f"max by (phase) ({sel('backlog_oldest_age_seconds', RUN_ONCE)})",
                        "oldest age {{phase}} (s)",
                    ),
                ],
            )
        )
        .with_panel(
            panel(
                6,
                "Poison",
                "Active bookings in quarantine, and those the last run isolated.",
                "short",
                [
                    query("A", f"sum({sel('poison', RUN_ONCE)})", "in quarantine"),
                    query(
                        "B",
                        f"sum({sel('poison_isolated', RUN_ONCE)})",
                        "isolated by the last run",
                    ),
                ],
            )
        )
        .with_panel(
            panel(
                7,
                "Outbox lag",
                "Rows not yet published, the age of the oldest, and rows given up on.",
                "short",
                [
                    query("A", f"sum({sel('outbox_pending', RELAY)})", "pending"),
                    query(
                        "B",
                        f"max({sel('outbox_oldest_pending_age_seconds', RELAY)})",
                        "oldest pending age (s)",
                    ),
                    query("C", f"sum({sel('outbox_failed', RELAY)})", "failed"),
                ],
            )
        )
        .with_panel(
            panel(
                8,
                "Publications per phase",
                "Events the last relay-outbox published, per Phase and topic.",
                "short",
                [
                    query(
                        "A",
                        f"sum by (phase, topic) ({sel('relay_publications', RELAY)})",
                        "{{phase}} {{topic}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                9,
                "Cycle duration",
                "The last run's duration, and the 95th percentile over the runs of the last "
                "hour (buckets summed over time: one observation per run).",
                "s",
                [
                    query("A", f"sum({sel('cycle_duration_seconds_sum', RUN_ONCE)})", "last run"),
                    query(
                        "B",
                        p_quantile(0.95, "le", "cycle_duration_seconds_bucket", RUN_ONCE, "1h"),
                        "p95 over 1h",
                    ),
                ],
            )
        )
        .with_panel(
            panel(
                10,
                "Commit to Kafka acknowledgement",
                "95th percentile of an event's age when Kafka acknowledged it, over the "
                "events of the last hour's relay runs (objective: under a minute end to end).",
                "s",
                [
                    query(
                        "A",
                        p_quantile(0.95, "le", "relay_ack_age_seconds_bucket", RELAY, "1h"),
                        "p95 over 1h",
                    )
                ],
            )
        )
        .with_panel(lateness)
    )


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the committed file instead of writing it; exit 1 on a difference",
    )
    args = parser.parse_args()
    text = render()
    if not args.check:
        OUTPUT.write_text(text)
        return 0
    committed = OUTPUT.read_text() if OUTPUT.exists() else ""
    if committed == text:
        print("monitoring/grafana-dashboard.json is what monitoring/dashboard/generate.py writes")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            text.splitlines(keepends=True),
            "monitoring/grafana-dashboard.json (committed)",
            "monitoring/grafana-dashboard.json (generated)",
        )
    )
    print(
        f"monitoring/grafana-dashboard.json differs from what "
        f"monitoring/dashboard/generate.py writes: run `{REGENERATE}` and commit the result",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
