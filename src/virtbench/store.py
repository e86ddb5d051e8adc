"""The results store: SQLite by default (a file), PostgreSQL by URL. Versioned schema.

Every attempt and sample is committed the moment it exists, so a crash or Ctrl-C loses nothing.
"""

from __future__ import annotations

import json
import shlex
from contextlib import contextmanager
import secrets
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from . import __version__
from .errors import UserError

SCHEMA_VERSION = 3  # 2: the timeseries table (the monitor's samples); 3: run_events

metadata = sa.MetaData()

meta = sa.Table("meta", metadata,
                sa.Column("key", sa.String(64), primary_key=True),
                sa.Column("value", sa.Text, nullable=False))

runs = sa.Table("runs", metadata,
                sa.Column("id", sa.String(40), primary_key=True),
                sa.Column("created_at", sa.Float, nullable=False),
                sa.Column("finished_at", sa.Float),
                sa.Column("status", sa.String(16), nullable=False),  # running|completed|interrupted|failed
                sa.Column("suite_name", sa.String(200)),
                sa.Column("suite_path", sa.Text),
                sa.Column("spec_json", sa.Text, nullable=False),  # the validated matrix, for resume
                sa.Column("baseline", sa.String(100)),
                sa.Column("virtbench_version", sa.String(40)),
                sa.Column("command", sa.Text),
                sa.Column("note", sa.Text))

environments = sa.Table("environments", metadata,
                        sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), primary_key=True),
                        sa.Column("name", sa.String(100), primary_key=True),
                        sa.Column("driver", sa.String(40), nullable=False),
                        sa.Column("spec_json", sa.Text, nullable=False),
                        sa.Column("facts_json", sa.Text),  # CPU, kernel, virtualization, image hash ...
                        sa.Column("problem", sa.Text))  # why this environment could not run, if so

instances = sa.Table("instances", metadata,
                     sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                     sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False, index=True),
                     sa.Column("environment", sa.String(100), nullable=False),
                     sa.Column("name", sa.String(200), nullable=False),
                     sa.Column("role", sa.String(40), nullable=False),
                     sa.Column("lifecycle_json", sa.Text),
                     sa.Column("metadata_json", sa.Text))

attempts = sa.Table("attempts", metadata,
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False, index=True),
                    sa.Column("cell_key", sa.String(64), nullable=False),
                    sa.Column("workload", sa.String(100), nullable=False),
                    sa.Column("params_json", sa.Text, nullable=False),
                    sa.Column("condition_json", sa.Text, nullable=False),
                    sa.Column("environment", sa.String(100), nullable=False),
                    sa.Column("repetition", sa.Integer, nullable=False),
                    sa.Column("warmup", sa.Boolean, nullable=False, default=False),
                    sa.Column("status", sa.String(16), nullable=False),  # ok|failed|skipped
                    sa.Column("reason", sa.Text),
                    sa.Column("detail", sa.Text),
                    sa.Column("started_at", sa.Float),
                    sa.Column("ended_at", sa.Float),
                    sa.Column("raw_output", sa.Text))

samples = sa.Table("samples", metadata,
                   sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                   sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False, index=True),
                   sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False),
                   sa.Column("cell_key", sa.String(64), nullable=False),
                   sa.Column("workload", sa.String(100), nullable=False),
                   sa.Column("params_json", sa.Text, nullable=False),
                   sa.Column("condition_json", sa.Text, nullable=False),
                   sa.Column("environment", sa.String(100), nullable=False),
                   sa.Column("repetition", sa.Integer, nullable=False),
                   sa.Column("metric", sa.String(100), nullable=False),
                   sa.Column("value", sa.Float, nullable=False),
                   sa.Column("unit", sa.String(40), nullable=False),
                   sa.Column("higher_is_better", sa.Boolean, nullable=False),
                   sa.Column("metadata_json", sa.Text, nullable=False))

# The monitor's series (1 Hz by default): one row per (sampler tick, metric), tied to its attempt.
timeseries = sa.Table("timeseries", metadata,
                      sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                      sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False),
                      sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False),
                      sa.Column("environment", sa.String(100), nullable=False),
                      sa.Column("repetition", sa.Integer, nullable=False),
                      sa.Column("instance", sa.String(200), nullable=False),  # an instance's name, or "host"
                      sa.Column("role", sa.String(40), nullable=False),
                      sa.Column("t", sa.Float, nullable=False),  # epoch seconds at the end of the interval
                      sa.Column("metric", sa.String(100), nullable=False),
                      sa.Column("value", sa.Float, nullable=False),
                      sa.Column("unit", sa.String(40), nullable=False),
                      # Where the values came from (/proc/stat, cgroup v1 ...): stored on the first row of each
                      # (attempt, instance, metric) only (a 64-replica sweep has ~400,000 rows), filled in on reading.
                      sa.Column("source", sa.Text),
                      sa.Index("ix_timeseries_run_attempt", "run_id", "attempt_id"))

# What happened to a run besides its attempts: resumed after an interruption, failed cells retried.
run_events = sa.Table("run_events", metadata,
                      sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                      sa.Column("run_id", sa.String(40), sa.ForeignKey("runs.id"), nullable=False, index=True),
                      sa.Column("at", sa.Float, nullable=False),
                      sa.Column("kind", sa.String(32), nullable=False),  # resumed | retry-failed | removed
                      sa.Column("detail", sa.Text))

RAW_LIMIT = 256 * 1024  # keep raw tool output, bounded, so parsers can be re-run on stored data


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def url_for(db: str | Path) -> str:
    """A PostgreSQL/SQLite URL as given, or a file path for SQLite."""
    text = str(db)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if path.parent and not path.parent.exists():
        raise UserError(f"database directory {path.parent} does not exist", "create it or pass another --db PATH")
    return f"sqlite:///{path}"


def _absolute(db: str | Path) -> str:
    """A --db as a hint repeats it: a file as an absolute path (the hint may be run elsewhere), a
    URL with its password hidden (hints are printed and stored)."""
    text = str(db)
    if "://" in text:
        return sa.engine.make_url(text).render_as_string(hide_password=True)
    return str(Path(text).expanduser().absolute())


class Store:
    def __init__(self, db: str | Path, *, named: str | Path | None = None):
        """named: the --db the user gave (None: the default database). Every hint that names a
        command repeats it (`db_option`), or the command would look in another database."""
        self.url = url_for(db)
        self.db_option = f" --db {shlex.quote(_absolute(named))}" if named else ""
        try:
            self.engine = sa.create_engine(self.url, future=True)
            if self.url.startswith("sqlite"):
                sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            self._init_schema()
        except sa.exc.OperationalError as exc:
            raise UserError(f"cannot open the results database {db}: {exc.orig}",
                            "check the path or URL and its permissions") from None
        except ModuleNotFoundError as exc:
            raise UserError(f"no database driver for {self.url.split(':')[0]}: {exc}",
                            "for PostgreSQL: pip install 'virtbench[postgres]'") from None

    def _init_schema(self) -> None:
        # Two processes opening a new database at once (a run and `virtbench show`) race on creating
        # its tables and version row ("table ... already exists", UNIQUE meta.key): the loser retries
        # and finds the work done.
        for attempt in range(6):
            try:
                return self._init_schema_once()
            except (sa.exc.OperationalError, sa.exc.IntegrityError) as exc:
                text = str(exc.orig)
                racing = isinstance(exc, sa.exc.IntegrityError) or "already exists" in text or "locked" in text
                if not racing or attempt == 5:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _init_schema_once(self) -> None:
        metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).first()
            if row is None:
                conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
            elif int(row[0]) > SCHEMA_VERSION:
                raise UserError(f"the database has schema version {row[0]}, newer than this virtbench's "
                                f"{SCHEMA_VERSION}", "upgrade virtbench or use another --db")
            elif int(row[0]) < SCHEMA_VERSION:
                # Migrations so far only add tables, which create_all above has just done (1 -> 2: timeseries,
                # 2 -> 3: run_events).
                conn.execute(meta.update().where(meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))

    # -- writing ---------------------------------------------------------------------------
    def create_run(self, spec: dict[str, Any], *, suite_name: str, suite_path: str | None, baseline: str,
                   command: str) -> str:
        run_id = new_run_id()
        with self.engine.begin() as conn:
            conn.execute(runs.insert().values(
                id=run_id, created_at=time.time(), status="running", suite_name=suite_name,
                suite_path=suite_path, spec_json=canonical(spec), baseline=baseline,
                virtbench_version=__version__, command=command))
        return run_id

    @contextmanager
    def recording_status(self, run_id: str, resume_command: str):
        """The run's status follows the block: completed when it ends, interrupted (with the command
        that resumes it) on Ctrl-C or SIGTERM, failed with the error otherwise."""
        try:
            yield
            self.set_status(run_id, "completed")
        except KeyboardInterrupt:
            self.set_status(run_id, "interrupted", f"interrupted; resume with: {resume_command}")
            raise
        except BaseException as exc:
            self.set_status(run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise

    def set_status(self, run_id: str, status: str, note: str | None = None) -> None:
        values: dict[str, Any] = {"status": status, "note": note}
        values["finished_at"] = None if status == "running" else time.time()
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.id == run_id).values(**values))

    def add_event(self, run_id: str, kind: str, detail: str = "") -> None:
        with self.engine.begin() as conn:
            conn.execute(run_events.insert().values(run_id=run_id, at=time.time(), kind=kind, detail=detail))

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's resumptions and retries, and the leftovers of earlier runs its sweeps removed
        (kind "removed", the name in `detail`), oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(run_events.c.at, run_events.c.kind, run_events.c.detail)
                                .where(run_events.c.run_id == run_id).order_by(run_events.c.id)).mappings()
            return [dict(r) for r in rows]

    def save_environment(self, run_id: str, name: str, driver: str, spec: dict, facts: dict | None,
                         problem: str | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(environments.delete().where(
                (environments.c.run_id == run_id) & (environments.c.name == name)))
            conn.execute(environments.insert().values(
                run_id=run_id, name=name, driver=driver, spec_json=canonical(spec),
                facts_json=canonical(facts) if facts is not None else None, problem=problem))

    def save_instance(self, run_id: str, environment: str, name: str, role: str, lifecycle: dict,
                      meta_: dict) -> int:
        with self.engine.begin() as conn:
            res = conn.execute(instances.insert().values(
                run_id=run_id, environment=environment, name=name, role=role,
                lifecycle_json=canonical(lifecycle), metadata_json=canonical(meta_)))
            return res.inserted_primary_key[0]

    def update_instance(self, instance_id: int, lifecycle: dict) -> None:
        with self.engine.begin() as conn:
            conn.execute(instances.update().where(instances.c.id == instance_id)
                         .values(lifecycle_json=canonical(lifecycle)))

    def record_attempt(self, run_id: str, cell: dict, environment: str, repetition: int, *, warmup: bool,
                       status: str, started: float | None, ended: float | None, reason: str | None = None,
                       detail: str | None = None, raw: str | None = None, samples_: list | None = None,
                       sample_metadata: dict | None = None, timeseries_: list[dict] | None = None) -> int:
        """One repetition, its samples and its monitoring series (rows of monitor.rows()), in one transaction."""
        base = {"run_id": run_id, "cell_key": cell["key"], "workload": cell["workload"],
                "params_json": canonical(cell["params"]), "condition_json": canonical(cell["condition"]),
                "environment": environment, "repetition": repetition}
        with self.engine.begin() as conn:
            res = conn.execute(attempts.insert().values(
                **base, warmup=warmup, status=status, reason=reason, detail=(detail or "")[-RAW_LIMIT:] or None,
                started_at=started, ended_at=ended, raw_output=raw[-RAW_LIMIT:] if raw else None))
            attempt_id = res.inserted_primary_key[0]
            if samples_ and not warmup:
                extra = sample_metadata or {}
                conn.execute(samples.insert(), [
                    {**base, "attempt_id": attempt_id, "metric": s.metric, "value": s.value, "unit": s.unit,
                     "higher_is_better": s.higher_is_better, "metadata_json": canonical({**extra, **s.metadata})}
                    for s in samples_])
            if timeseries_:
                sourced: set[tuple[str, str]] = set()

                def first(r: dict) -> bool:
                    key = (r["instance"], r["metric"])
                    new = key not in sourced
                    sourced.add(key)
                    return new

                conn.execute(timeseries.insert(), [
                    {"run_id": run_id, "attempt_id": attempt_id, "environment": environment, "repetition": repetition,
                     "instance": r["instance"], "role": r["role"], "t": r["t"], "metric": r["metric"],
                     "value": r["value"], "unit": r["unit"], "source": r.get("source") if first(r) else None}
                    for r in timeseries_])
            return attempt_id

    # -- reading ---------------------------------------------------------------------------
    def run(self, run_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().first()
            if row is None:
                # Accept a unique prefix, as git does.
                rows = conn.execute(sa.select(runs).where(runs.c.id.like(f"{run_id}%"))).mappings().all()
                if len(rows) != 1:
                    known = [r["id"] for r in self.runs()[:5]]
                    hint = (f"list runs with: virtbench runs{self.db_option}"
                            + (f" (latest: {', '.join(known)})" if known else ""))
                    what = "is ambiguous" if rows else "is not in"
                    raise UserError(f"run id '{run_id}' {what} the database {self.url}", hint)
                row = rows[0]
        out = dict(row)
        out["spec"] = json.loads(out.pop("spec_json"))
        return out

    def runs(self) -> list[dict[str, Any]]:
        # Measured samples only: the monitor's summaries (metadata "monitor":true) are derived from series.
        counts = (sa.select(samples.c.run_id, sa.func.count().label("samples"))
                  .where(samples.c.metadata_json.not_like('%"monitor":true%'))
                  .group_by(samples.c.run_id).subquery())
        fails = (sa.select(attempts.c.run_id, sa.func.count().label("failures"))
                 .where(attempts.c.status == "failed").group_by(attempts.c.run_id).subquery())
        q = (sa.select(runs.c.id, runs.c.created_at, runs.c.finished_at, runs.c.status, runs.c.note, runs.c.suite_name,
                       runs.c.baseline, sa.func.coalesce(counts.c.samples, 0).label("samples"),
                       sa.func.coalesce(fails.c.failures, 0).label("failures"))
             .outerjoin(counts, counts.c.run_id == runs.c.id).outerjoin(fails, fails.c.run_id == runs.c.id)
             .order_by(runs.c.created_at.desc()))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def environments(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(environments).where(environments.c.run_id == run_id)).mappings()
            return [{**dict(r), "spec": json.loads(r["spec_json"]),
                     "facts": json.loads(r["facts_json"]) if r["facts_json"] else {}} for r in rows]

    def instances(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(instances).where(instances.c.run_id == run_id)).mappings()
            return [{**dict(r), "lifecycle": json.loads(r["lifecycle_json"] or "{}"),
                     "metadata": json.loads(r["metadata_json"] or "{}")} for r in rows]

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(attempts).where(attempts.c.run_id == run_id)
                                .order_by(attempts.c.id)).mappings()
            return [dict(r) for r in rows]

    def outcomes(self, run_id: str) -> list[dict[str, Any]]:
        """The attempts that were not ok (failed, timed out, skipped) without their raw output: what
        analysis needs of them (a 10,000-sample run has 10,000 ok attempts with output)."""
        a = attempts
        q = (sa.select(a.c.cell_key, a.c.environment, a.c.status, a.c.reason, a.c.warmup)
             .where(a.c.run_id == run_id, a.c.status != "ok").order_by(a.c.id))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def attempt_counts(self, run_id: str) -> list[dict[str, Any]]:
        """Attempts per (cell, environment, status, warm-up), counted: which cells have results."""
        a = attempts
        cols = [a.c.cell_key, a.c.environment, a.c.status, a.c.warmup]
        q = sa.select(*cols, sa.func.count().label("count")).where(a.c.run_id == run_id).group_by(*cols)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def samples(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(samples).where(samples.c.run_id == run_id)
                                .order_by(samples.c.id)).mappings()
            return [dict(r) for r in rows]

    def timeseries(self, run_id: str, *, instance: str | None = None, metric: str | None = None) -> list[dict[str, Any]]:
        """The monitor's rows of a run (instance, role, environment, attempt_id, repetition, t, metric, value,
        unit, source), oldest first."""
        q = sa.select(timeseries).where(timeseries.c.run_id == run_id)
        if instance is not None:
            q = q.where(timeseries.c.instance == instance)
        if metric is not None:
            q = q.where(timeseries.c.metric == metric)
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(q.order_by(timeseries.c.t, timeseries.c.id)).mappings()]
        sources: dict[tuple, str | None] = {}
        for r in rows:  # only each series' first row of an attempt stores its source
            key = (r["attempt_id"], r["instance"], r["metric"])
            if r["source"] is None:
                r["source"] = sources.get(key)
            else:
                sources[key] = r["source"]
        return rows

    def dataframe(self, run_id: str):
        """A run's samples as a pandas DataFrame, params/condition/metadata expanded to dicts."""
        import pandas as pd

        run_id = self.run(run_id)["id"]
        with self.engine.connect() as conn:
            df = pd.read_sql(sa.select(samples).where(samples.c.run_id == run_id).order_by(samples.c.id), conn)
        for col in ("params", "condition", "metadata"):
            df[col] = df.pop(f"{col}_json").map(json.loads)
        return df


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers (virtbench show) never block a running suite; synchronous=NORMAL is still crash-safe in WAL.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
