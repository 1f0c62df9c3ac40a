package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/mysql"
)

// The MySQL dialect (MySQL or MariaDB), for the daemon scenario only: the
// server is -mysql-db, else $SQLEASE_TEST_MYSQL_URL (scripts/test.sh sets
// it for its own run); none is started here. Each run gets a database of
// its own, dropped afterwards, so the URL's user must be allowed to create
// and drop databases.

// mysqlURL is the server -dialects mysql uses, or "".
func mysqlURL(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(mysqltest.URLEnv)
}

// newMySQLTarget creates a fresh database on e.mysqlURL.
func (e *env) newMySQLTarget(ctx context.Context) (*target, error) {
	if e.mysqlURL == "" {
		return nil, fmt.Errorf("-dialects mysql: no server: set -mysql-db or $%s (a mysql:// URL of a user that may CREATE DATABASE)", mysqltest.URLEnv)
	}
	name := "sqlease_bench_" + randHex(4)
	db, err := mysql.Open(e.mysqlURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	dsn, err := mysqltest.WithDatabase(e.mysqlURL, name)
	if err != nil {
		return nil, err
	}
	return &target{env: e, dialect: "mysql", dsn: dsn, dbName: name, cleanup: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db, err := mysql.Open(e.mysqlURL)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	}}, nil
}
