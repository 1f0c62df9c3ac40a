-- Least privilege on SQL Server / Azure SQL: run in the sqlease database as
-- an administrator (for Entra ID identities use CREATE USER … FROM EXTERNAL
-- PROVIDER instead of logins; deploy/azure does). Two users:
--   sqlease_migrator runs `sqlease migrate` (DDL);
--   sqlease_app      is what `sqlease serve --migrate=false` connects as.
-- sp_getapplock (advisory mode) needs only the public role. Not tested here:
-- no SQL Server runs on this machine.
CREATE LOGIN sqlease_migrator WITH PASSWORD = 'Change-me-migrator-1';
CREATE LOGIN sqlease_app WITH PASSWORD = 'Change-me-app-1';
CREATE USER sqlease_migrator FOR LOGIN sqlease_migrator;
CREATE USER sqlease_app FOR LOGIN sqlease_app;
ALTER ROLE db_ddladmin ADD MEMBER sqlease_migrator;
ALTER ROLE db_datareader ADD MEMBER sqlease_migrator;
ALTER ROLE db_datawriter ADD MEMBER sqlease_migrator;
GRANT SELECT, INSERT, UPDATE, DELETE ON SCHEMA::dbo TO sqlease_app;
