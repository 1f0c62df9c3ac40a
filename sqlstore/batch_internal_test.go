package sqlstore

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// execJSON passes every item once, in order, in arrays of at most
// maxJSONArg bytes, an item longer than that alone.
func TestExecJSONChunks(t *testing.T) {
	var items []string
	for i := range 300 {
		items = append(items, strings.Repeat("\x01", i*50)) // 6 bytes each escaped
	}
	items = append(items, strings.Repeat("x", maxJSONArg), "last")
	var got []string
	calls := 0
	err := execJSON(items, func(arg string) error {
		calls++
		var part []string
		if err := json.Unmarshal([]byte(arg), &part); err != nil {
			t.Fatalf("argument %d is not a JSON array: %v", calls, err)
		}
		if len(arg) > maxJSONArg && len(part) != 1 {
			t.Errorf("argument %d: %d bytes, %d items", calls, len(arg), len(part))
		}
		got = append(got, part...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, items) {
		t.Errorf("items passed differ from those given (%d of %d)", len(got), len(items))
	}
	if calls < 3 {
		t.Errorf("%d calls for %d items of about 14 MiB escaped", calls, len(items))
	}
	if err := execJSON([]string(nil), func(string) error { t.Error("called for no items"); return nil }); err != nil {
		t.Fatal(err)
	}
}
