package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/httpapi"
)

// Issue 30 item 8: a job body's member names must be spelled as
// documented, and none given twice — in the body and in its action —
// or encoding/json reads another job than the one a person (or a
// redaction) reads. Each is a 400 naming the member.
func TestDecodeJobRefusesNonCanonicalJSON(t *testing.T) {
	for _, c := range []struct{ body, detail string }{
		{`{"Name":"a","schedule":{},"action":{"http":{"url":"http://h/"}}}`, `Name: must be spelled "name"`},
		{`{"name":"a","schedule":{"EVERY":"1m"},"action":{"http":{"url":"http://h/"}}}`, `schedule.EVERY: must be spelled "every"`},
		{`{"name":"a","name":"b","schedule":{},"action":{"http":{"url":"http://h/"}}}`, "name: appears twice"},
		{`{"name":"a","schedule":{},"action":{"http":{"url":"http://decoy/"},"http":{"url":"http://real/"}}}`, "action.http: appears twice"},
	} {
		_, err := httpapi.DecodeJob(strings.NewReader(c.body))
		if err == nil || httpapi.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("DecodeJob(%s) = %v, want a 400 with %q", c.body, err, c.detail)
		}
	}
}
