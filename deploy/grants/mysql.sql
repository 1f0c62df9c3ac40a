-- Least privilege on MySQL / MariaDB: run as an administrator. Two users:
--   sqlease_migrator runs `sqlease migrate` (DDL on the sqlease database);
--   sqlease_app      is what `sqlease serve --migrate=false` connects as:
--                    reads and writes rows, no DDL.
-- GET_LOCK (advisory mode) needs no privilege.
CREATE USER 'sqlease_migrator'@'%' IDENTIFIED BY 'change-me-migrator';
CREATE USER 'sqlease_app'@'%' IDENTIFIED BY 'change-me-app';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON sqlease.* TO 'sqlease_migrator'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON sqlease.* TO 'sqlease_app'@'%';
