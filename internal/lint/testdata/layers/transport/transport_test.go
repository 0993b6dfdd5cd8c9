package transport

// Test files are not checked.
import _ "example.com/m/engine"
