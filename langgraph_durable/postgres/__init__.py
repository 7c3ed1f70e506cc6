"""PostgreSQL savers (extra ``postgres``: psycopg 3 and psycopg_pool)."""

from .saver import AsyncPostgresSaver, PostgresOptions, PostgresSaver

__all__ = ["PostgresSaver", "AsyncPostgresSaver", "PostgresOptions"]
