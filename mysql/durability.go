package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// Durability is what a MySQL/MariaDB server promises about a commit it has
// acknowledged, read from its settings.
type Durability struct {
	// FlushLogAtTrxCommit is innodb_flush_log_at_trx_commit: 1 writes and
	// flushes the redo log at every commit; 2 only writes it (a crash of
	// the host loses up to a second of commits), 0 neither (a crash of the
	// server does).
	FlushLogAtTrxCommit int64
	// LogBin tells whether the binary log is on.
	LogBin bool
	// SyncBinlog is sync_binlog: 1 flushes the binary log at every commit;
	// 0 leaves it to the operating system, N every N commits.
	SyncBinlog int64
}

// Weak lists the settings by which a commit the server acknowledged can be
// lost in a crash — a 2xx of sqlease's API would then not mean durable
// (SPEC G6): innodb_flush_log_at_trx_commit other than 1, and sync_binlog
// other than 1 while the binary log is on. Nil when there are none.
func (d Durability) Weak() []string {
	var out []string
	if d.FlushLogAtTrxCommit != 1 {
		out = append(out, fmt.Sprintf("innodb_flush_log_at_trx_commit=%d (want 1)", d.FlushLogAtTrxCommit))
	}
	if d.LogBin && d.SyncBinlog != 1 {
		out = append(out, fmt.Sprintf("sync_binlog=%d with the binary log on (want 1)", d.SyncBinlog))
	}
	return out
}

// ReadDurability reads the server's durability settings, in one statement.
func ReadDurability(ctx context.Context, db *sql.DB) (Durability, error) {
	var d Durability
	var logBin int64
	err := db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog`).
		Scan(&d.FlushLogAtTrxCommit, &logBin, &d.SyncBinlog)
	if err != nil {
		return Durability{}, fmt.Errorf("read durability settings: %w", Classify(err))
	}
	d.LogBin = logBin != 0
	return d, nil
}

// WarnWeakDurability logs one Warn, database_durability_weak, when the
// server's settings let a crash lose commits it acknowledged (Durability.Weak),
// and a Warn database_durability_unknown when they cannot be read. sqlease
// cannot change them for its own sessions as it does on PostgreSQL
// (synchronous_commit): they are global. Call it once at start.
func WarnWeakDurability(ctx context.Context, db *sql.DB, log *slog.Logger) {
	if log == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := ReadDurability(ctx, db)
	if err != nil {
		log.Warn("database_durability_unknown", slog.String("sql_error", err.Error()))
		return
	}
	if weak := d.Weak(); weak != nil {
		log.Warn("database_durability_weak", slog.Any("settings", weak),
			slog.String("hint", "a crash can lose commits the server acknowledged, so a 2xx of the API may not be durable: set innodb_flush_log_at_trx_commit=1 and, with the binary log on, sync_binlog=1"))
	}
}
