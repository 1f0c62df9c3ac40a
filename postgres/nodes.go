package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
)

// nodeSessionPrefix starts the application_name of a node's session.
const nodeSessionPrefix = "sqlease-node "

// NodeSessionName is the application_name of the session a node keeps
// for as long as it runs (its lease feed, ListenLeaseFeedAs): the prefix
// and the holder id, or, when that would pass PostgreSQL's 63 bytes, the
// id's first 30 bytes and a hash of the whole.
func NodeSessionName(holder string) string {
	name := nodeSessionPrefix + holder
	if len(name) <= 63 && isASCII(holder) {
		return name
	}
	sum := sha256.Sum256([]byte(holder))
	short := holder
	for len(short) > 30 || !isASCII(short) {
		short = short[:len(short)-1]
	}
	return nodeSessionPrefix + short + "~" + hex.EncodeToString(sum[:8])
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// NodeSessions returns the NodeSessionName of every node session connected
// to db's database now: one read of pg_stat_activity (which shows every
// session's application_name to every user). A node killed outright loses
// its session as soon as the server sees its connection close —
// milliseconds on the same network; a node cut off keeps it until TCP
// keepalive gives up.
func NodeSessions(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT application_name FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'sqlease-node %'`)
	if err != nil {
		return nil, fmt.Errorf("read the node sessions: %w", Classify(err))
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read the node sessions: %w", Classify(err))
		}
		out[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the node sessions: %w", Classify(err))
	}
	return out, nil
}
