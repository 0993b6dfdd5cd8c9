// Command x may import anything.
package main

import (
	_ "example.com/m/engine/core"
	_ "example.com/m/fsm"
)

func main() {}
