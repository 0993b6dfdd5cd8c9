package execworker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

func TestStepSpecStep(t *testing.T) {
	t.Parallel()
	var sp StepSpec
	require.NoError(t, DecodeJSON([]byte(`{
		"name": "load", "pool": "etl", "kind": "load", "payload": {"table": "t", "n": [1, 2]},
		"priority": "high", "labels": {"zone": "eu"}, "tags": {"trace": "1"}, "timeout": "1m30s",
		"max_attempts": 3, "depends_on": ["clean", "extract"], "dependency_policy": "done",
		"external": true, "run_at": "2030-01-02T15:04:05+01:00", "deadline": "2030-01-03T00:00:00Z",
		"ordering_key": "acct-7", "concurrency_key": "tenant-1"
	}`), &sp))
	st, err := sp.Step()
	require.NoError(t, err)
	require.Equal(t, client.Step{
		Name: "load",
		Task: client.TaskSpec{
			Template: client.Template{
				Pool: "etl", Kind: "load", Priority: client.PriorityHigh, Payload: []byte(`{"table":"t","n":[1,2]}`),
				Labels: map[string]string{"zone": "eu"}, Tags: map[string]string{"trace": "1"},
				Timeout: 90 * time.Second, MaxAttempts: 3,
				OrderingKey: "acct-7", ConcurrencyKey: "tenant-1",
			},
			RunAt:            time.Date(2030, 1, 2, 14, 4, 5, 0, time.UTC),
			Deadline:         time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC),
			DependencyPolicy: client.DependencyPolicyDone,
			External:         true,
		},
		DependsOn: []string{"clean", "extract"},
	}, normalize(st))

	// The least a step needs; a string payload is taken as is, and so is
	// base64 once decoded.
	for _, tc := range []struct {
		json, payload string
	}{
		{`{"pool": "p", "kind": "k"}`, ""},
		{`{"pool": "p", "kind": "k", "payload": null}`, ""},
		{`{"pool": "p", "kind": "k", "payload": "{\"a\": 1}"}`, `{"a": 1}`},
		{`{"pool": "p", "kind": "k", "payload": 42}`, `42`},
		{`{"pool": "p", "kind": "k", "payload_base64": "AP8="}`, "\x00\xff"},
		{`{"pool": "p", "kind": "k", "delay": "5m"}`, ""},
	} {
		var sp StepSpec
		require.NoError(t, DecodeJSON([]byte(tc.json), &sp), tc.json)
		st, err := sp.Step()
		require.NoError(t, err, tc.json)
		require.Equal(t, tc.payload, string(st.Task.Payload), tc.json)
		require.Nil(t, st.DependsOn)
		require.Nil(t, st.Task.Labels)
	}
}

// normalize makes the instants of a step comparable with require.Equal.
func normalize(st client.Step) client.Step {
	st.Task.RunAt = st.Task.RunAt.UTC()
	st.Task.Deadline = st.Task.Deadline.UTC()
	return st
}

func TestStepSpecErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want string
	}{
		{`{"kind": "k"}`, "pool: required"},
		{`{"pool": "p"}`, "kind: required"},
		{`{"pool": "p", "kind": "k", "priority": "urgent"}`, `priority: "urgent" is not high, normal or low`},
		{`{"pool": "p", "kind": "k", "timeout": "soon"}`, `timeout: "soon" is not a duration (examples: 30s, 5m, 1h30m)`},
		{`{"pool": "p", "kind": "k", "timeout": "-1s"}`, "timeout: must not be negative"},
		{`{"pool": "p", "kind": "k", "delay": "1s", "run_at": "2030-01-01T00:00:00Z"}`, "delay: excludes run_at"},
		{`{"pool": "p", "kind": "k", "run_at": "tomorrow"}`, `run_at: "tomorrow" is not an RFC 3339 time (example: 2030-01-02T15:04:05Z)`},
		{`{"pool": "p", "kind": "k", "deadline": "2030-01-01"}`, `deadline: "2030-01-01" is not an RFC 3339 time`},
		{`{"pool": "p", "kind": "k", "dependency_policy": "any"}`, `dependency_policy: "any" is not succeeded or done`},
		{`{"pool": "p", "kind": "k", "max_attempts": -1}`, "max_attempts: must not be negative"},
		{`{"pool": "p", "kind": "k", "max_attempts": 4294967296}`, "max_attempts: 4294967296 is out of range"},
		{`{"pool": "p", "kind": "k", "payload": "x", "payload_base64": "eA=="}`, "payload_base64: excludes payload"},
		{`{"pool": "p", "kind": "k", "payload_base64": "%%"}`, "payload_base64: not standard base64"},
		{`{"pool": "p", "kind": "k", "depends_on": ["a", ""]}`, "depends_on[1]: empty step name"},
	}
	for _, tc := range tests {
		var sp StepSpec
		require.NoError(t, DecodeJSON([]byte(tc.json), &sp), tc.json)
		_, err := sp.Step()
		require.ErrorContains(t, err, tc.want, tc.json)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
	}
}

func TestDecodeJSONStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want string
	}{
		{`{"pool": "p", "colour": "red"}`, `unknown field "colour"`},
		{`{"Pool": "p"}`, `unknown field "Pool"`},
		{`{"pool": 1}`, "pool: want string, got number"},
		{`{"max_attempts": "3"}`, "max_attempts: want integer, got string"},
		{`{"external": "yes"}`, "external: want true or false, got string"},
		{`{"depends_on": "a"}`, "depends_on: want array, got string"},
		{`{"labels": {"a": 1}}`, "labels: want string, got number"},
		{`{"pool": "p"} {"pool": "q"}`, "unexpected data after the JSON value"},
		{`{"pool": "p"`, "not valid JSON"},
		{`{"pool": "p",}`, "not valid JSON"},
		{``, "empty"},
		{`[]`, "want object, got array"},
	}
	for _, tc := range tests {
		var sp StepSpec
		err := DecodeJSON([]byte(tc.json), &sp)
		require.ErrorContains(t, err, tc.want, tc.json)
		require.NotContains(t, err.Error(), "json:", tc.json)
		require.NotContains(t, err.Error(), "Go struct", tc.json)
	}
}
