// Package driverconn is what the dialects' wrappers of a driver's
// connection share (sqlite's write gate, mysql's statement cache): the
// optional interfaces database/sql uses, asserted once, so that a wrapper
// implements them all and overrides only what it changes.
package driverconn

import (
	"context"
	"database/sql/driver"
	"fmt"
)

// Conn is a driver connection with its optional interfaces. A wrapper
// embeds it; Ping, ResetSession and IsValid pass through.
type Conn struct {
	driver.Conn
	BeginTxer driver.ConnBeginTx
	Preparer  driver.ConnPrepareContext
	Execer    driver.ExecerContext
	Queryer   driver.QueryerContext
	Pinger    driver.Pinger
	Resetter  driver.SessionResetter
	Validator driver.Validator
}

// Of asserts conn's optional interfaces. A connection that lacks one is an
// error naming the dialect: a driver whose version changed them would
// otherwise lose, unnoticed, what database/sql does with them.
func Of(dialect string, conn driver.Conn) (Conn, error) {
	c := Conn{Conn: conn}
	var ok [7]bool
	c.BeginTxer, ok[0] = conn.(driver.ConnBeginTx)
	c.Preparer, ok[1] = conn.(driver.ConnPrepareContext)
	c.Execer, ok[2] = conn.(driver.ExecerContext)
	c.Queryer, ok[3] = conn.(driver.QueryerContext)
	c.Pinger, ok[4] = conn.(driver.Pinger)
	c.Resetter, ok[5] = conn.(driver.SessionResetter)
	c.Validator, ok[6] = conn.(driver.Validator)
	for _, o := range ok {
		if !o {
			return Conn{}, fmt.Errorf("%s: the driver's connection (%T) lacks an interface database/sql uses (driver version changed?)", dialect, conn)
		}
	}
	return c, nil
}

func (c *Conn) Ping(ctx context.Context) error         { return c.Pinger.Ping(ctx) }
func (c *Conn) ResetSession(ctx context.Context) error { return c.Resetter.ResetSession(ctx) }
func (c *Conn) IsValid() bool                          { return c.Validator.IsValid() }

// Full is every interface of a driver connection that database/sql uses and
// the dialects' wrappers keep: a wrapper asserts it at compile time.
type Full interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}
