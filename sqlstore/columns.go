package sqlstore

import "strings"

// A table's columns newer than its first version are listed once per
// dialect as (name, SQL type and constraints) pairs: they are part of
// CREATE TABLE for a new schema (ColumnsDDL) and added to an older table by
// Migrate (AddColumns).

// ColumnsDDL is defs as lines of a CREATE TABLE: "name type, …".
func ColumnsDDL(defs [][2]string) string {
	lines := make([]string, len(defs))
	for i, c := range defs {
		lines[i] = c[0] + " " + c[1]
	}
	return strings.Join(lines, ",\n\t")
}

// AddColumns lists defs as Columns of table that Migrate adds where they
// are missing, each with the statement alter + "name type" (alter is the
// dialect's "ALTER TABLE t ADD COLUMN " or its equivalent).
func AddColumns(table, alter string, defs [][2]string) []Column {
	out := make([]Column, len(defs))
	for i, c := range defs {
		out[i] = Column{Table: table, Name: c[0], Add: alter + c[0] + " " + c[1]}
	}
	return out
}
