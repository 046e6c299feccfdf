"""Alembic environment: always handed a live connection by subscriber.store.migrate."""

from alembic import context

from subscriber.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `lccn-subscriber db upgrade`")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
