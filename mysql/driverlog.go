package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// driverLog is the logger of the driver's own messages (SetDriverLogger);
// nil: slog.Default().
var driverLog atomic.Pointer[slog.Logger]

// SetDriverLogger sends the messages go-sql-driver/mysql logs by itself
// (e.g. "closing bad idle connection: EOF" when the server closed an idle
// connection of the pool, which the driver then replaces) to l, as warnings
// with the message mysql_driver and the driver's text in the attribute
// text. It applies to every pool Open makes, also those opened before the
// call; nil (the default) uses slog.Default(). Without it the driver writes
// unstructured "[mysql] …" lines to standard error.
func SetDriverLogger(l *slog.Logger) { driverLog.Store(l) }

// slogDriverLogger adapts mysql.Logger to log/slog.
type slogDriverLogger struct{}

func (slogDriverLogger) Print(v ...any) {
	l := driverLog.Load()
	if l == nil {
		l = slog.Default()
	}
	text := strings.TrimSpace(fmt.Sprint(v...)) // as the driver's own log.Logger.Print
	l.LogAttrs(context.Background(), slog.LevelWarn, "mysql_driver", slog.String("text", text))
}

var installDriverLogger sync.Once

// useDriverLogger makes cfg's connections log through slog, and the
// driver's default logger too (connections made without a Config of ours).
func useDriverLogger(cfg *mysql.Config) {
	installDriverLogger.Do(func() { _ = mysql.SetLogger(slogDriverLogger{}) })
	cfg.Logger = slogDriverLogger{}
}
