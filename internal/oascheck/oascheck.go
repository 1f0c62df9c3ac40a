// Package oascheck holds real responses of the daemon to its OpenAPI
// document (httpapi/openapi.json): the status must be documented for the
// operation, and a JSON body must validate against the documented schema
// (JSON Schema 2020-12, which OpenAPI 3.1 uses).
package oascheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Checker checks responses against one document.
type Checker struct {
	doc map[string]any
	c   *jsonschema.Compiler
	ops map[string]map[string]any // "METHOD /path" → operation
}

const docURL = "file:///openapi.json"

// New parses an OpenAPI 3.1 document.
func New(doc []byte) (*Checker, error) {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	if v, _ := d["openapi"].(string); !strings.HasPrefix(v, "3.1") {
		return nil, fmt.Errorf("openapi: version %q, want 3.1.x", v)
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, raw); err != nil {
		return nil, err
	}
	k := &Checker{doc: d, c: c, ops: map[string]map[string]any{}}
	paths, _ := d["paths"].(map[string]any)
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			if o, ok := op.(map[string]any); ok {
				k.ops[strings.ToUpper(method)+" "+path] = o
			}
		}
	}
	return k, nil
}

// Operations returns "METHOD /path" of every documented operation, sorted.
func (k *Checker) Operations() []string {
	var out []string
	for op := range k.ops {
		out = append(out, op)
	}
	sort.Strings(out)
	return out
}

// PathParams returns the names of an operation's path parameters.
func (k *Checker) PathParams(op string) []string {
	var out []string
	params, _ := k.ops[op]["parameters"].([]any)
	for _, p := range params {
		if m, _ := p.(map[string]any); m["in"] == "path" {
			out = append(out, fmt.Sprint(m["name"]))
		}
	}
	sort.Strings(out)
	return out
}

// Check checks one response to op ("METHOD /path" as documented).
func (k *Checker) Check(op string, status int, contentType string, body []byte) error {
	o, ok := k.ops[op]
	if !ok {
		return fmt.Errorf("%s is not documented", op)
	}
	responses, _ := o["responses"].(map[string]any)
	resp, ok := responses[strconv.Itoa(status)].(map[string]any)
	if !ok {
		return fmt.Errorf("%s answered %d, which is not documented for it (body %.200s)", op, status, body)
	}
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s %d: documented without a body, got %.200s", op, status, body)
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("%s %d: Content-Type %q: %v", op, status, contentType, err)
	}
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s %d: Content-Type %s is not documented (documented: %v)", op, status, mt, keys(content))
	}
	if mt != "application/json" && mt != "application/problem+json" {
		return nil
	}
	ptr := "#/paths/" + escape(strings.SplitN(op, " ", 2)[1]) + "/" + strings.ToLower(strings.SplitN(op, " ", 2)[0]) +
		"/responses/" + strconv.Itoa(status) + "/content/" + escape(mt) + "/schema"
	sch, err := k.c.Compile(docURL + ptr)
	if err != nil {
		return fmt.Errorf("%s %d: compiling the schema: %v", op, status, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %d: the body is not JSON: %v: %.200s", op, status, err, body)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s %d: the body does not match the document: %v\nbody: %.500s", op, status, err, body)
	}
	return nil
}

// Schema returns a component schema's property names and required ones.
func (k *Checker) Schema(name string) (props, required []string, ok bool) {
	comps, _ := k.doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	s, ok := schemas[name].(map[string]any)
	if !ok {
		return nil, nil, false
	}
	ps, _ := s["properties"].(map[string]any)
	for p := range ps {
		props = append(props, p)
	}
	rs, _ := s["required"].([]any)
	for _, r := range rs {
		required = append(required, fmt.Sprint(r))
	}
	sort.Strings(props)
	sort.Strings(required)
	return props, required, true
}

// escape is JSON Pointer escaping.
func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
