package parsetier_test

// The tests and examples talk to a real parsetier server. TestMain uses PARSETIER_SERVER
// (host:port) when it is set (tests/test_go_client.py sets it); otherwise it starts
// `parsetier serve --port 0` itself with the repository's Python (PARSETIER_PYTHON, else
// .venv/bin/python, else python3). When neither works the run fails with a message saying
// what to do: a plain `go test ./...` never passes without having reached a server.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	stop, err := ensureServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "parsetier Go tests: no server: %v\n"+
			"  set PARSETIER_SERVER=host:port of a running server, or create the repository's .venv "+
			"(`make lint` at the repository root) so the tests can start `parsetier serve`\n", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// ensureServer leaves PARSETIER_SERVER set to a server's address, starting one if needed, and
// returns what stops it.
func ensureServer() (stop func(), err error) {
	if os.Getenv("PARSETIER_SERVER") != "" {
		return func() {}, nil
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	python := os.Getenv("PARSETIER_PYTHON")
	if python == "" {
		python = "python3"
		if venv := filepath.Join(root, ".venv", "bin", "python"); fileExists(venv) {
			python = venv
		}
	}
	cmd := exec.Command(python, "-m", "parsetier.cli", "serve", "--port", "0", "--preload", "qwen3")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "server")+string(os.PathListSeparator)+
		filepath.Join(root, "client", "python")+string(os.PathListSeparator)+filepath.Join(root, "protos", "python"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s -m parsetier.cli serve: %w", python, err)
	}
	port := make(chan int, 1)
	go func() { // the server logs one JSON object per line; "listening" names the port
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			var record struct {
				Msg  string `json:"msg"`
				Port int    `json:"port"`
			}
			if json.Unmarshal(scanner.Bytes(), &record) == nil && record.Msg == "listening" {
				port <- record.Port
			}
		}
		close(port)
	}()
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	select {
	case p, ok := <-port:
		if !ok {
			kill()
			return nil, fmt.Errorf("%s -m parsetier.cli serve exited before listening", python)
		}
		os.Setenv("PARSETIER_SERVER", fmt.Sprintf("127.0.0.1:%d", p))
		return kill, nil
	case <-time.After(60 * time.Second):
		kill()
		return nil, fmt.Errorf("%s -m parsetier.cli serve did not listen within 60 s", python)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
