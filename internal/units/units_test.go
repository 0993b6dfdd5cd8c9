package units

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSizeWords(t *testing.T) {
	for n, want := range map[int]string{
		0: "0 bytes", 1: "1 byte", 300: "300 bytes", 1023: "1023 bytes", 1024: "1 KiB",
		1536: "1.5 KiB", 1 << 20: "1 MiB", 1100000: "1.05 MiB", 5 << 30: "5 GiB",
	} {
		require.Equal(t, want, Words(n), "%d", n)
	}
	require.Equal(t, "1.05 MiB exceeds the limit of 1 MiB", TooBig(1100000, 1<<20))
}
