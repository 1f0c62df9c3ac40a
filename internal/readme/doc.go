// Package readme holds the repository's documentation to the code: the
// README's quick start runs as written, docs/api.md names exactly the
// routes of httpapi/openapi.json, and no link of the README or docs/ leaves
// the repository or points at a missing file.
package readme
