// Package cliargs reads what vgpud's programs' command lines share before
// their flags are parsed: whether they ask for help.
package cliargs

// WantsHelp reports whether args ask for help (-h, -help, --help) before
// any "--".
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}
