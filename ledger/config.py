"""Configuration, built once by the composition root (the CLI or a test) and passed in.

* Embedded default: SQLite files under one data directory — ``events.db`` (event
  store, eventsourcing's SQLite recorder with :mod:`ledger.recorders` polling
  subscriptions) and ``views.db`` (read models).
* Scale: ``HOOKLEDGER_DATABASE_URL=postgresql://user@host:port/db`` puts the event store
  (eventsourcing's PostgreSQL recorder, LISTEN/NOTIFY) and the read models in
  PostgreSQL; ``HOOKLEDGER_DATABASE_SCHEMA`` picks a schema. Same code path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str | None = None
    database_schema: str | None = None
    archive_after_days: int = 30
    """Liveness job: archive sessions ended more than this many days ago."""
    jobs_interval_s: float = 60.0
    """How often ``hookledger serve`` runs the liveness jobs (seconds; 0: never)."""
    summaries_interval_s: float = 5.0
    """How often ``hookledger serve`` summarises closed batches and ended sessions
    (seconds; 0: never)."""
    transcript_quiet_s: float = 2.0
    """``hookledger serve`` imports the transcript a local hook names once that
    transcript's hooks have been quiet this long (seconds; 0: never): token usage and
    replies are only in transcripts (:mod:`api.transcript_follower`)."""
    llm_base_url: str | None = None
    """OpenAI-compatible API for the optional LLM summariser (e.g.
    ``http://127.0.0.1:8080/v1``); None: the deterministic summariser only."""
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str | None = None
    llm_day_tokens: int = 200_000
    """LLM summariser budget: tokens per UTC day, all sessions."""
    llm_session_tokens: int = 20_000
    """LLM summariser budget: tokens per session."""

    @classmethod
    def from_env(cls, data_dir: str | Path | None = None) -> Settings:
        """``--data-dir`` beats ``HOOKLEDGER_DATA_DIR``; default: the platform user data dir."""
        chosen = data_dir or os.environ.get("HOOKLEDGER_DATA_DIR")
        if not chosen:
            import platformdirs

            chosen = platformdirs.user_data_dir("hookledger")
        return cls(
            data_dir=Path(chosen).expanduser(),
            database_url=os.environ.get("HOOKLEDGER_DATABASE_URL") or None,
            database_schema=os.environ.get("HOOKLEDGER_DATABASE_SCHEMA") or None,
            archive_after_days=int(os.environ.get("HOOKLEDGER_ARCHIVE_AFTER_DAYS") or 30),
            jobs_interval_s=float(os.environ.get("HOOKLEDGER_JOBS_INTERVAL_S") or 60),
            summaries_interval_s=float(os.environ.get("HOOKLEDGER_SUMMARIES_INTERVAL_S") or 5),
            transcript_quiet_s=float(os.environ.get("HOOKLEDGER_TRANSCRIPT_QUIET_S") or 2),
            llm_base_url=os.environ.get("HOOKLEDGER_LLM_BASE_URL") or None,
            llm_model=os.environ.get("HOOKLEDGER_LLM_MODEL") or "gpt-4o-mini",
            llm_api_key=os.environ.get("HOOKLEDGER_LLM_API_KEY") or None,
            llm_day_tokens=int(os.environ.get("HOOKLEDGER_LLM_DAY_TOKENS") or 200_000),
            llm_session_tokens=int(os.environ.get("HOOKLEDGER_LLM_SESSION_TOKENS") or 20_000),
        )

    @property
    def is_postgres(self) -> bool:
        return bool(self.database_url) and self.database_url.split(":", 1)[0].startswith("postgres")

    def event_store_env(self) -> dict[str, str]:
        """Environment for the eventsourcing ``Ledger`` application."""
        if self.is_postgres:
            # not at import: `hookledger hook` loads this module
            from sqlalchemy.engine import make_url

            url = make_url(self.database_url or "")
            env = {
                "PERSISTENCE_MODULE": "eventsourcing.postgres",
                "POSTGRES_DBNAME": url.database or "postgres",
                "POSTGRES_HOST": url.host or "127.0.0.1",
                "POSTGRES_PORT": str(url.port or 5432),
                "POSTGRES_USER": url.username or "postgres",
                "POSTGRES_PASSWORD": url.password or "",
                "POSTGRES_LOCK_TIMEOUT": "30",
                # Inserts under the library's table lock, in one unpipelined statement
                # (ledger.pg_recorder): the library's pipelined insert never returned for
                # one event of ~2 MB or more (psycopg 3.3), and its stored-function insert
                # takes no lock (ids committed out of order: projections skipped events).
                "APPLICATION_RECORDER_TOPIC": "ledger.pg_recorder:OrderedPostgresApplicationRecorder",
            }
            if self.database_schema:
                env["POSTGRES_SCHEMA"] = self.database_schema
            return env
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(self.sqlite_path),
            "SQLITE_LOCK_TIMEOUT": "30",
            "APPLICATION_RECORDER_TOPIC": "ledger.recorders:PollingSQLiteApplicationRecorder",
        }

    @property
    def sqlite_path(self) -> Path:
        """The embedded event store's file, ``<data dir>/events.db`` (whether it exists
        or not; unused with PostgreSQL)."""
        return self.data_dir / "events.db"

    def data_dir_id(self) -> str:
        """16 hex characters naming this data directory (sha256 of its resolved path):
        ``/healthz`` shows it, so ``doctor`` can tell that a local server serves another
        data directory than the hooks spool into, without the path itself."""
        import hashlib

        return hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]

    def store_identity(self) -> str:
        """Names the event store these settings open, for records kept beside it in the
        data directory (export anchors): ``sqlite:events.db`` (the data directory's
        own file, wherever the directory moves), or the PostgreSQL server, database
        and schema (no user, no password)."""
        if not self.is_postgres:
            return "sqlite:events.db"
        from sqlalchemy.engine import make_url

        url = make_url(self.database_url or "")
        schema = self.database_schema or "public"
        return f"postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database or 'postgres'}?schema={schema}"

    def views_url(self) -> str:
        """SQLAlchemy URL of the read models."""
        if self.is_postgres:
            from sqlalchemy.engine import make_url

            url = make_url(self.database_url or "").set(drivername="postgresql+psycopg")
            return url.render_as_string(hide_password=False)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.data_dir / 'views.db'}"
