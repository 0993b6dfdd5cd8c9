package clienttest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCronNext(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v.UTC()
	}
	for _, tc := range []struct {
		expr, tz, after, want string
	}{
		{"0 3 * * *", "", "2030-01-02T12:00:00Z", "2030-01-03T03:00:00Z"},
		{"0 3 * * *", "Europe/Paris", "2030-01-02T12:00:00Z", "2030-01-03T02:00:00Z"},
		{"0 3 * * *", "Europe/Paris", "2030-07-02T12:00:00Z", "2030-07-03T01:00:00Z"},
		{"*/15 * * * *", "", "2030-01-02T12:07:00Z", "2030-01-02T12:15:00Z"},
		{"30 */2 * * *", "", "2030-01-02T12:30:00Z", "2030-01-02T14:30:00Z"},
		{"5 0 * * 1-5", "", "2030-01-04T12:00:00Z", "2030-01-07T00:05:00Z"}, // Friday to Monday
		{"0 0 1 jan *", "", "2030-01-02T00:00:00Z", "2031-01-01T00:00:00Z"},
		{"0 12 * * sun", "", "2030-01-02T00:00:00Z", "2030-01-06T12:00:00Z"},
		{"0 0 13 * fri", "", "2030-01-01T00:00:00Z", "2030-01-04T00:00:00Z"}, // day 13 or a Friday
		{"0 0 29 2 *", "", "2030-01-01T00:00:00Z", "2032-02-29T00:00:00Z"},
		{"10 * * * * *", "", "2030-01-02T12:00:10Z", "2030-01-02T12:01:10Z"}, // seconds field
		{"@hourly", "", "2030-01-02T12:00:00Z", "2030-01-02T13:00:00Z"},
		{"@daily", "", "2030-01-02T12:00:00Z", "2030-01-03T00:00:00Z"},
		{"@weekly", "", "2030-01-02T12:00:00Z", "2030-01-06T00:00:00Z"},
		{"@monthly", "", "2030-01-02T12:00:00Z", "2030-02-01T00:00:00Z"},
		{"@yearly", "", "2030-01-02T12:00:00Z", "2031-01-01T00:00:00Z"},
		{"@every 30s", "", "2030-01-02T12:00:10Z", "2030-01-02T12:00:30Z"},
		{"@every 7m", "Asia/Tokyo", "2030-01-02T12:00:00Z", "2030-01-02T12:06:00Z"}, // multiples of 7m since the epoch, whatever the zone
		// 02:30 does not exist in New York on 2030-03-10 (spring forward).
		{"30 2 * * *", "America/New_York", "2030-03-09T12:00:00Z", "2030-03-11T06:30:00Z"},
	} {
		t.Run(tc.expr+" "+tc.tz+" "+tc.after, func(t *testing.T) {
			e, err := parseCron(tc.expr, tc.tz)
			require.NoError(t, err)
			require.Equal(t, utc(tc.want), e.next(utc(tc.after)))
		})
	}
}

func TestCronRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, tz, want string
		zone           bool
	}{
		{"", "", "empty expression", false},
		{"* * *", "", "expected 5 or 6 fields", false},
		{"61 * * * *", "", `minute field "61": value 61 out of range [0, 59]`, false},
		{"* 24 * * *", "", "hour field", false},
		{"* * 0 * *", "", "day-of-month field", false},
		{"* * * 13 *", "", "month field", false},
		{"* * * * 7", "", "day-of-week field", false},
		{"*/0 * * * *", "", "bad step", false},
		{"5-1 * * * *", "", "backwards", false},
		{"@every 1.5s", "", "not a whole number of seconds", false},
		{"@every 500ms", "", "shorter than 1s", false},
		{"@every soon", "", "invalid duration", false},
		{"@fortnightly", "", "unknown descriptor", false},
		{"TZ=UTC 0 3 * * *", "", "zone prefix", false},
		{"0 0 30 2 *", "", "never fires", false},
		{"@daily", "Mars/Base", `unknown time zone "Mars/Base"`, true},
		{"@daily", "Local", "IANA zone", true},
	} {
		t.Run(tc.expr+" "+tc.tz, func(t *testing.T) {
			_, err := parseCron(tc.expr, tc.tz)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.zone, errors.Is(err, errUnknownZone))
		})
	}
}
