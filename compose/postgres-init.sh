#!/bin/bash
# Run once by the postgres image when it creates its database: the agent's own role, the
# owner of the replica database (so it creates the datamarts' schemas and its own tables
# there), with no superuser, no CREATEROLE and no CREATEDB. Its password is
# PODD_AGENT_DB_PASSWORD from .env (make-secrets.sh).
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v password="$PODD_AGENT_DB_PASSWORD" -v dbname="$POSTGRES_DB" \
    -v role="${PODD_AGENT_DB_ROLE:-podd_agent}" <<'SQL'
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
ALTER DATABASE :"dbname" OWNER TO :"role";
ALTER SCHEMA public OWNER TO :"role";
SQL
