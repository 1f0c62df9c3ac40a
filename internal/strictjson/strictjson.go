// Package strictjson refuses the JSON that encoding/json accepts but reads
// differently from how a person (or another part of the program) reads it.
//
// encoding/json matches an object's member to a struct field without regard
// to case ("HTTP" and "Url" fill the fields tagged "http" and "url", even
// "headerſ" with a long s fills "headers"), and of two members with the
// same name it keeps the last. Code that reads the same text another way —
// a redaction that looks up "http" in a map, a gate that looks for "exec" —
// then sees something else than what runs: a secret shown in clear, a
// decoy redacted while the hidden twin runs. Check refuses such text before
// it is decoded, so that there is one reading of it.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a refusal by Check: Path names the offending member in the
// value's own terms ("http.url", "headers.Authorization", "command[2]"; ""
// for the value itself) and Problem says what is wrong.
type Error struct {
	Path    string
	Problem string
}

// Error returns "path: problem", or the problem alone for the value itself.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// Options adjust Check.
type Options struct {
	// NoNUL also refuses a NUL character (\u0000) in any string or member
	// name: text bound for a database column (PostgreSQL's text refuses it).
	NoNUL bool
}

// Check walks raw, JSON about to be decoded into a value of v's type (a
// pointer or a value; only its type is used), and returns an *Error for:
//
//   - invalid UTF-8 anywhere (encoding/json would turn it into U+FFFD
//     silently);
//   - a member name that appears twice in one object; in an object decoded
//     into a struct or a map, also two names that differ only in case;
//   - in an object decoded into a struct, a member whose name matches a
//     field only without regard to case: it must be spelled exactly as the
//     field's JSON name;
//   - with opts.NoNUL, a NUL in any string or member name.
//
// Members that match no field at all, syntax errors and wrong types are
// left to the decoder (Check returns nil for them), whose errors say more.
// A field of type json.RawMessage, any, or a type with its own UnmarshalJSON
// is checked for duplicates and encoding only: its own decoder checks the
// rest when it decodes it.
func Check(raw []byte, v any, opts Options) error {
	c := checker{raw: raw, opts: opts, dec: json.NewDecoder(bytes.NewReader(raw))}
	var t reflect.Type
	if v != nil {
		t = reflect.TypeOf(v)
	}
	err := c.value("", t)
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if !utf8.Valid(raw) { // outside the tokens read, or after a syntax error
		return &Error{"", "invalid UTF-8"}
	}
	return nil // a syntax error: the decoder's to report
}

type checker struct {
	raw  []byte
	opts Options
	dec  *json.Decoder
	at   int64 // input offset after the last token
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textType        = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// token reads the next token and checks the bytes it spans.
func (c *checker) token(path string) (json.Token, error) {
	tok, err := c.dec.Token()
	if err != nil {
		return nil, err
	}
	end := c.dec.InputOffset()
	span := c.raw[c.at:end]
	c.at = end
	if !utf8.Valid(span) {
		return nil, &Error{path, "invalid UTF-8"}
	}
	if s, ok := tok.(string); ok && c.opts.NoNUL && strings.IndexByte(s, 0) >= 0 {
		return nil, &Error{path, "a string contains a NUL character (\\u0000)"}
	}
	return tok, nil
}

// value checks one JSON value to be decoded into type t (nil: anything).
func (c *checker) value(path string, t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawMessageType || t.Kind() == reflect.Interface ||
		reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType)) {
		t = nil // opaque here: its own decoder reads it
	}
	tok, err := c.token(path)
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; c.dec.More(); i++ {
			if err := c.value(path+"["+strconv.Itoa(i)+"]", elem); err != nil {
				return err
			}
		}
		_, err := c.token(path)
		return err
	case '{':
		return c.object(path, t)
	}
	return nil
}

// object checks the members of an object whose '{' was read.
func (c *checker) object(path string, t reflect.Type) error {
	var fields map[string]reflect.Type // a struct's fields by JSON name
	folded := false                    // case-variant names are duplicates
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields, folded = jsonFields(t), true
		case reflect.Map:
			// A map decoded by its text keys keeps them as written; a map
			// of strings (headers, variables) is read case-insensitively
			// by whoever uses it.
			folded = !reflect.PointerTo(t.Key()).Implements(textType)
			elem = t.Elem()
		}
	}
	seen := map[string]string{}
	for c.dec.More() {
		tok, err := c.token(path)
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		member := join(path, name)
		key := name
		if folded {
			key = strings.ToLower(name)
		}
		if prev, dup := seen[key]; dup {
			if prev == name {
				return &Error{member, "appears twice in one object"}
			}
			return &Error{member, fmt.Sprintf("appears twice in one object (as %q and %q: names differ only in case)", prev, name)}
		}
		seen[key] = name
		vt := elem
		if fields != nil {
			ft, exact := fields[name]
			if !exact {
				for fname := range fields {
					if equalFold(fname, name) {
						return &Error{member, fmt.Sprintf("must be spelled %q (member names are case-sensitive)", fname)}
					}
				}
			}
			vt = ft // nil for an unknown member: the decoder refuses it
		}
		if err := c.value(member, vt); err != nil {
			return err
		}
	}
	_, err := c.token(path)
	return err
}

// equalFold is how encoding/json matches a name to a field: ASCII case and
// Unicode simple folding (K and the Kelvin sign, s and the long s).
func equalFold(a, b string) bool {
	return strings.EqualFold(a, b)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonFields returns a struct's fields by their JSON names, as
// encoding/json names them (tag name, else the Go name; "-" skipped;
// embedded structs without a tag promoted).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, typ := range jsonFields(ft) {
					if _, ok := out[n]; !ok {
						out[n] = typ
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
