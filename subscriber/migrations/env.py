"""Alembic environment: always handed a live connection by subscriber.store.migrate."""

from alembic import context

from subscriber.store.tables import with_partial_indexes

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `lccn-subscriber db upgrade`")

context.configure(
    connection=connection,
    target_metadata=with_partial_indexes(),
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
