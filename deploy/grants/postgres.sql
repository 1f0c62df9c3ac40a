-- Least privilege on PostgreSQL: run as an administrator, in the database
-- sqlease uses. Two roles:
--   sqlease_migrator owns the schema objects: it runs `sqlease migrate`
--                    (before the fleet starts and after each upgrade);
--   sqlease_app      is what `sqlease serve --migrate=false` connects as:
--                    reads and writes rows, no DDL.
-- Advisory locks, LISTEN/NOTIFY and the trigger functions need no grant.
-- internal/e2e/grants_test.go runs exactly these statements (names and
-- passwords replaced) and a failover on top of them.
CREATE ROLE sqlease_migrator LOGIN PASSWORD 'change-me-migrator';
CREATE ROLE sqlease_app LOGIN PASSWORD 'change-me-app';
GRANT CONNECT ON DATABASE sqlease TO sqlease_migrator, sqlease_app;
GRANT USAGE, CREATE ON SCHEMA public TO sqlease_migrator;
GRANT USAGE ON SCHEMA public TO sqlease_app;
-- Whatever sqlease_migrator creates, now or in a later migration, the
-- serving role may read and write, but not alter.
ALTER DEFAULT PRIVILEGES FOR ROLE sqlease_migrator IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO sqlease_app;
ALTER DEFAULT PRIVILEGES FOR ROLE sqlease_migrator IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO sqlease_app;
