// Command argocd-health runs Argo CD resource health scripts (health.lua) under gopher-lua, the Lua
// 5.1 runtime Argo CD embeds, set up the way Argo CD sets it up, and checks them against test cases
// in the layout of Argo CD's resource customisations:
//
//	<group>/<Kind>/health.lua
//	<group>/<Kind>/health_test.yaml   tests: [{inputPath: testdata/x.yaml, healthStatus: {status, message}}]
//	<group>/<Kind>/testdata/*.yaml    the objects, as the cluster holds them
//
// Usage:
//
//	argocd-health test ROOT            every health.lua under ROOT against its health_test.yaml;
//	                                   one JSON line per case and mode, exit 1 if any case fails
//	argocd-health eval SCRIPT < OBJ    the health of one object (JSON or YAML on standard input)
//	argocd-health -version             the gopher-lua version it was built with
//
// Each case runs twice: with Lua's standard libraries closed, as Argo CD runs a script given in
// argocd-cm (`resource.customizations.health.<group>_<Kind>`, useOpenLibs false), and with them
// open, as Argo CD's own tests run the scripts it ships. Both must give the expected status and
// message exactly.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

const (
	gopherLua = "github.com/yuin/gopher-lua"
	// What Argo CD answers when a script returns a status outside its set.
	invalidHealthStatus = "Lua returned an invalid health status"
	// Argo CD gives a script this long.
	scriptTimeout = time.Second
)

// The statuses Argo CD accepts from a health script.
var healthStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Suspended": true, "Degraded": true, "Missing": true, "Unknown": true,
}

// What Argo CD leaves of Lua's os library in a script's state: reading the clock, nothing that
// touches the process or the filesystem.
var safeOsFunctions = map[string]bool{"clock": true, "date": true, "difftime": true, "time": true}

type health struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type testFile struct {
	Tests []struct {
		InputPath    string `json:"inputPath"`
		HealthStatus health `json:"healthStatus"`
	} `json:"tests"`
}

type caseResult struct {
	Script   string  `json:"script"`
	Input    string  `json:"inputPath"`
	OpenLibs bool    `json:"openLibs"`
	Expected health  `json:"expected"`
	Got      *health `json:"got,omitempty"`
	Error    string  `json:"error,omitempty"`
	Passed   bool    `json:"passed"`
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "-version":
		fmt.Println(moduleVersion(gopherLua))
	case len(os.Args) == 3 && os.Args[1] == "test":
		os.Exit(runTests(os.Args[2]))
	case len(os.Args) == 3 && os.Args[1] == "eval":
		os.Exit(evalOne(os.Args[2]))
	default:
		fmt.Fprintln(os.Stderr, "usage: argocd-health test ROOT | argocd-health eval SCRIPT < OBJECT | argocd-health -version")
		os.Exit(2)
	}
}

func runTests(root string) int {
	scripts, err := healthScripts(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-health: %v\n", err)
		return 1
	}
	if len(scripts) == 0 {
		fmt.Fprintf(os.Stderr, "argocd-health: no health.lua under %s\n", root)
		return 1
	}
	out := json.NewEncoder(os.Stdout)
	failed := 0
	for _, script := range scripts {
		results, err := runScriptTests(script)
		if err != nil {
			fmt.Fprintf(os.Stderr, "argocd-health: %v\n", err)
			return 1
		}
		for _, result := range results {
			if !result.Passed {
				failed++
			}
			if err := out.Encode(result); err != nil {
				return 1
			}
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// healthScripts finds every health.lua under root, in a stable order.
func healthScripts(root string) ([]string, error) {
	var scripts []string
	err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !entry.IsDir() && entry.Name() == "health.lua" {
			scripts = append(scripts, path)
		}
		return nil
	})
	sort.Strings(scripts)
	return scripts, err
}

func runScriptTests(scriptPath string) ([]caseResult, error) {
	dir := filepath.Dir(scriptPath)
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
	if err != nil {
		return nil, fmt.Errorf("%s has no health_test.yaml beside it: %w", scriptPath, err)
	}
	var tests testFile
	if err := yaml.UnmarshalStrict(raw, &tests); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "health_test.yaml"), err)
	}
	if len(tests.Tests) == 0 {
		return nil, fmt.Errorf("%s lists no tests", filepath.Join(dir, "health_test.yaml"))
	}
	var results []caseResult
	for _, test := range tests.Tests {
		input, err := os.ReadFile(filepath.Join(dir, test.InputPath))
		if err != nil {
			return nil, err
		}
		obj, err := parseObject(input)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", test.InputPath, err)
		}
		for _, openLibs := range []bool{false, true} {
			result := caseResult{Script: scriptPath, Input: test.InputPath, OpenLibs: openLibs, Expected: test.HealthStatus}
			got, err := evaluate(string(script), obj, openLibs)
			if err != nil {
				result.Error = err.Error()
			} else {
				result.Got = got
				result.Passed = *got == test.HealthStatus
			}
			results = append(results, result)
		}
	}
	return results, nil
}

func evalOne(scriptPath string) int {
	script, err := os.ReadFile(scriptPath)
	if err == nil {
		var input []byte
		input, err = io.ReadAll(os.Stdin)
		if err == nil {
			var obj map[string]any
			obj, err = parseObject(input)
			if err == nil {
				var got *health
				got, err = evaluate(string(script), obj, false)
				if err == nil {
					err = json.NewEncoder(os.Stdout).Encode(got)
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-health: %v\n", err)
		return 1
	}
	return 0
}

// parseObject reads YAML or JSON into the generic map a client decodes an object into.
func parseObject(input []byte) (map[string]any, error) {
	obj := map[string]any{}
	if err := yaml.Unmarshal(input, &obj); err != nil {
		return nil, err
	}
	if len(obj) == 0 {
		return nil, errors.New("the object is empty")
	}
	return obj, nil
}

// evaluate runs a health script against an object: the script sees it as the global `obj` and
// returns a table with `status` and `message`.
func evaluate(script string, obj map[string]any, openLibs bool) (*health, error) {
	state := newState(openLibs)
	defer state.Close()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	state.SetContext(ctx)
	state.SetGlobal("obj", toLua(state, obj))
	if err := state.DoString(script); err != nil {
		return nil, err
	}
	returned := state.Get(-1)
	table, ok := returned.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("expect table output from Lua script, not %s", returned.Type())
	}
	got := &health{}
	for field, target := range map[string]*string{"status": &got.Status, "message": &got.Message} {
		switch value := table.RawGetString(field).(type) {
		case *lua.LNilType:
		case lua.LString:
			*target = string(value)
		default:
			return nil, fmt.Errorf("the script's %s is a %s, not a string", field, value.Type())
		}
	}
	if !healthStatuses[got.Status] {
		return &health{Status: "Unknown", Message: invalidHealthStatus}, nil
	}
	return got, nil
}

// newState opens what Argo CD opens for a health script: the package, base and table libraries
// and a safe os library; every other standard library only with openLibs.
func newState(openLibs bool) *lua.LState {
	state := lua.NewState(lua.Options{SkipOpenLibs: !openLibs})
	if !openLibs {
		for _, lib := range []struct {
			name string
			open lua.LGFunction
		}{
			{lua.LoadLibName, lua.OpenPackage},
			{lua.BaseLibName, lua.OpenBase},
			{lua.TabLibName, lua.OpenTable},
			{lua.OsLibName, lua.OpenOs},
		} {
			state.Push(state.NewFunction(lib.open))
			state.Push(lua.LString(lib.name))
			state.Call(1, 0)
		}
	}
	if osLib, ok := state.GetGlobal(lua.OsLibName).(*lua.LTable); ok {
		var unsafe []lua.LValue
		osLib.ForEach(func(key, _ lua.LValue) {
			if !safeOsFunctions[key.String()] {
				unsafe = append(unsafe, key)
			}
		})
		for _, key := range unsafe {
			osLib.RawSet(key, lua.LNil)
		}
	}
	return state
}

// toLua turns decoded JSON into Lua values: objects into tables keyed by name, arrays into
// sequences from 1, numbers into Lua numbers.
func toLua(state *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		table := state.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(toLua(state, item))
		}
		return table
	case map[string]any:
		table := state.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	default:
		return lua.LNil
	}
}

func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == path {
			return dep.Version
		}
	}
	return "unknown"
}
