package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

type inner struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

type outer struct {
	HTTP  *inner          `json:"http,omitempty"`
	Raw   json.RawMessage `json:"raw"`
	List  []inner         `json:"list"`
	Any   any             `json:"any"`
	Skip  string          `json:"-"`
	Plain string
}

func TestCheck(t *testing.T) {
	for _, c := range []struct{ in, path, problem string }{
		{`{"http":{"url":"x","headers":{"A":"1"}},"raw":{"X":1},"list":[{"url":"y"}],"any":{"a":1,"A":2},"Plain":"p"}`, "", ""},
		{`{"unknown":1}`, "", ""}, // the decoder's to refuse
		{`{"http":`, "", ""},      // likewise
		{`{"HTTP":{"url":"x"}}`, "HTTP", `must be spelled "http"`},
		{`{"http":{"URL":"x"}}`, "http.URL", `must be spelled "url"`},
		{`{"http":{"url":"x","headerſ":{}}}`, "http.headerſ", `must be spelled "headers"`},
		{`{"list":[{"url":"a"},{"Url":"b"}]}`, "list[1].Url", `must be spelled "url"`},
		{`{"plain":"p"}`, "plain", `must be spelled "Plain"`},
		{`{"http":{"url":"a"},"http":{"url":"b"}}`, "http", "appears twice"},
		{`{"http":{"url":"a","headers":{"Authorization":"a","authorization":"b"}}}`, "http.headers.authorization", "differ only in case"},
		{`{"raw":{"x":1,"x":2}}`, "raw.x", "appears twice"},
		{`{"any":[{"k":1,"k":1}]}`, "any[0].k", "appears twice"},
		{"{\"http\":{\"url\":\"\xff\"}}", "http.url", "invalid UTF-8"},
		{"{\"http\":{\"url\":\"a\"}}  \xff", "", "invalid UTF-8"},
		{`{"http":{"url":"a\u0000"}}`, "http.url", "NUL"},
	} {
		err := Check([]byte(c.in), &outer{}, Options{NoNUL: true})
		if c.problem == "" {
			if err != nil {
				t.Errorf("%s: %v", c.in, err)
			}
			continue
		}
		e, ok := err.(*Error)
		if !ok || e.Path != c.path || !strings.Contains(e.Problem, c.problem) {
			t.Errorf("%s: got %v, want %s: …%s…", c.in, err, c.path, c.problem)
		}
	}
	if err := Check([]byte(`{"a":"\u0000"}`), nil, Options{}); err != nil {
		t.Errorf("NUL refused without NoNUL: %v", err)
	}
}

// FuzzCheck: never a panic, and whatever Check accepts decodes into the
// same value whichever of encoding/json's readings is taken.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"http":{"url":"x"}}`, `{"HTTP":{}}`, `{"a":[1,{"b":2}]}`, `[`, `{"http":{"headers":{"a":"1","A":"2"}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if Check(raw, &outer{}, Options{}) != nil {
			return
		}
		var o outer
		if json.Unmarshal(raw, &o) != nil || o.HTTP == nil {
			return
		}
		var m map[string]map[string]any
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		if u, _ := m["http"]["url"].(string); u != o.HTTP.URL {
			t.Fatalf("accepted %s: the struct reads url %q, a map %q", raw, o.HTTP.URL, u)
		}
	})
}
