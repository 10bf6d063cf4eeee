// A stand-in for the caplb binaries in the image tests: it answers --version like they do.
package main

import (
	"fmt"
	"os"
)

var version = "unset"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("fakebin", version)
		return
	}
	os.Exit(2)
}
