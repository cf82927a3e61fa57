// Command major serves the Claude Code CLI to the notes app's clients.
package main

func main() {}
