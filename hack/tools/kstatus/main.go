// Command kstatus computes what kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status) says of
// Kubernetes objects: the status GitOps tools such as Flux and kpt wait on.
//
// It reads one object, or a List as `kubectl get -o json` prints it, as JSON on standard input, and
// prints one JSON line per object: its kind, namespace, name, and the result of status.Compute
// (status, message, and the conditions kstatus derived). `kstatus -version` prints the version of
// cli-utils it was built with.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

const cliUtils = "sigs.k8s.io/cli-utils"

type verdict struct {
	Kind       string             `json:"kind"`
	Namespace  string             `json:"namespace,omitempty"`
	Name       string             `json:"name"`
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-version" {
		fmt.Println(moduleVersion(cliUtils))
		return
	}
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: kstatus < objects.json   (or kstatus -version)")
		os.Exit(2)
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading standard input: %v", err)
	}
	objects, err := decode(input)
	if err != nil {
		fail("%v", err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, obj := range objects {
		result, err := status.Compute(obj)
		if err != nil {
			fail("%s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		conditions := result.Conditions
		if conditions == nil {
			conditions = []status.Condition{}
		}
		if err := out.Encode(verdict{
			Kind:       obj.GetKind(),
			Namespace:  obj.GetNamespace(),
			Name:       obj.GetName(),
			Status:     result.Status.String(),
			Message:    result.Message,
			Conditions: conditions,
		}); err != nil {
			fail("writing the result: %v", err)
		}
	}
}

// decode reads the objects the way a client does (unstructured, integers as int64), so kstatus sees
// what it sees of a live object.
func decode(input []byte) ([]*unstructured.Unstructured, error) {
	var probe struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(input, &probe); err != nil {
		return nil, fmt.Errorf("standard input is not a JSON object: %w", err)
	}
	if probe.Items != nil && !bytes.Equal(bytes.TrimSpace(probe.Items), []byte("null")) {
		list := &unstructured.UnstructuredList{}
		if err := list.UnmarshalJSON(input); err != nil {
			return nil, fmt.Errorf("reading the list: %w", err)
		}
		objects := make([]*unstructured.Unstructured, 0, len(list.Items))
		for i := range list.Items {
			objects = append(objects, &list.Items[i])
		}
		return objects, nil
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(input); err != nil {
		return nil, fmt.Errorf("reading the object: %w", err)
	}
	return []*unstructured.Unstructured{obj}, nil
}

// moduleVersion is the version of a module this binary was built with, from its build information.
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

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(1)
}
