// Command modzip writes to stdout the zip of a Go module as a module proxy serves it, from the
// files named on stdin (one path a line, relative to the module root, which is the working
// directory): what `git ls-files` lists is what a tag of the repository would hold. It applies
// the go command's rules for module zips that matter here: every file under "<module>@<version>/",
// no file of a nested module (a subdirectory with its own go.mod), no vendor directory.
//
//	git ls-files -co --exclude-standard | go run ./tools/modzip <module>@<version> > v.zip
package main

import (
	"archive/zip"
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) != 2 || !strings.Contains(os.Args[1], "@") {
		fmt.Fprintln(os.Stderr, "usage: modzip <module>@<version> < file-list > module.zip")
		os.Exit(2)
	}
	if err := write(os.Stdout, os.Args[1], os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "modzip:", err)
		os.Exit(1)
	}
}

func write(out io.Writer, prefix string, list io.Reader) error {
	var files []string
	lines := bufio.NewScanner(list)
	for lines.Scan() {
		name := path.Clean(lines.Text())
		info, err := os.Lstat(name)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted since the last commit, a symlink, or not a file
		}
		if inNestedModule(name) || strings.HasPrefix(name, "vendor/") || strings.Contains(name, "/vendor/") {
			continue
		}
		files = append(files, name)
	}
	if err := lines.Err(); err != nil {
		return err
	}
	sort.Strings(files) // the same zip for the same files
	archive := zip.NewWriter(out)
	for _, name := range files {
		if err := add(archive, prefix+"/"+name, name); err != nil {
			return err
		}
	}
	return archive.Close()
}

// inNestedModule tells whether a directory above name (below the root) has a go.mod.
func inNestedModule(name string) bool {
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if _, err := os.Stat(path.Join(dir, "go.mod")); err == nil {
			return true
		}
	}
	return false
}

func add(archive *zip.Writer, entry, name string) error {
	in, err := os.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	w, err := archive.Create(entry)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, in)
	return err
}
