// Command jepsen is cronoq's fault-injection harness. It runs a real
// three-node cluster of the cronoq binary inside its own network and PID
// namespaces (see jepsen/run-in-netns.sh), drives it with concurrent
// workloads through the Go SDK while a nemesis partitions, kills, pauses,
// skews clocks and slows disks, and checks the recorded history.
//
//	jepsen run [flags]        one run; exit 0 valid, 1 invalid, 2 inconclusive, 3 harness error
//	jepsen check DIR          re-check a saved run
//	jepsen selftest [flags]   run the targeted schedules against the bug builds
//	jepsen cleanup [DIR]      remove node data dirs left in results
package main

import (
	"fmt"
	"os"
)

// Exit codes.
const (
	exitValid        = 0
	exitInvalid      = 1
	exitInconclusive = 2
	exitHarness      = 3
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitHarness)
	}
	var code int
	switch os.Args[1] {
	case "run":
		code = cmdRun(os.Args[2:])
	case "check":
		code = cmdCheck(os.Args[2:])
	case "selftest":
		code = cmdSelftest(os.Args[2:])
	case "cleanup":
		code = cmdCleanup(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		code = 0
	default:
		fmt.Fprintf(os.Stderr, "jepsen: unknown command %q\n", os.Args[1])
		usage()
		code = exitHarness
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  jepsen run [-bin bin/cronoq-jepsen] [-schedule smoke|smoke-secure|soak|bug-NAME] [-duration 30m] [-seed N] [-secure] [-results DIR] [-out DIR]
  jepsen check DIR
  jepsen selftest [-bin-dir bin] [-results DIR]
  jepsen cleanup [RESULTS_DIR]

run must execute inside fresh network and PID namespaces: use jepsen/run-in-netns.sh.
exit codes: 0 valid, 1 invalid, 2 inconclusive, 3 harness error
`)
}
