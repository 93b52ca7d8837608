// Command celdiff-upstream gives upstream's verdict on DRA device selectors, for dralloc's
// differential test of its CEL (bench/celdiff.py).
//
// It compiles each expression with k8s.io/dynamic-resource-allocation/cel the two ways
// Kubernetes does: as the API server validates a new or changed claim or class (the "new
// expressions" environment, which honours the feature gates, with the static cost
// estimate that validation compares to the limit), and as kube-scheduler's allocator does
// (the "stored expressions" environment, which declares everything, no estimate). It then
// evaluates the stored-mode program against the case's device with the runtime cost limit,
// as the allocator does, and reports the result or error and the actual cost.
//
// Input: JSON lines on stdin, one case each (see caseIn). Output: one JSON line per case,
// in order (see verdict). With -versions it prints the module versions it was built with.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// costLimit is resourceapi.CELSelectorExpressionMaxCost: the estimate's limit at validation
// and the runtime limit of one evaluation.
const costLimit = resourceapi.CELSelectorExpressionMaxCost

type features struct {
	ConsumableCapacity bool `json:"consumableCapacity"`
	ListTypeAttributes bool `json:"listTypeAttributes"`
}

type device struct {
	Driver                   string                                                    `json:"driver"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations,omitempty"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type caseIn struct {
	ID         int      `json:"id"`
	Expression string   `json:"expression"`
	Device     device   `json:"device"`
	Features   features `json:"features"`
}

// newVerdict is what API validation decides about a new expression.
type newVerdict struct {
	Error *string `json:"error"`
	// Estimate is the static worst-case cost (absent after a compile error).
	Estimate *uint64 `json:"estimate"`
	// Refused: the estimate is over the limit ("too complex, exceeds cost limit").
	Refused bool `json:"refused"`
}

// evalVerdict is what the allocator gets from the stored-mode program on the device.
type evalVerdict struct {
	Result     *bool   `json:"result"`
	Error      *string `json:"error"`
	ActualCost *uint64 `json:"actualCost"`
}

type verdict struct {
	ID          int          `json:"id"`
	New         newVerdict   `json:"new"`
	StoredError *string      `json:"storedError"`
	Eval        *evalVerdict `json:"eval"`
}

// compiler is the method set of the package's (unexported) compiler type; GetCompiler
// keeps only the last one, so one is kept here per feature combination.
type compiler interface {
	CompileCELExpression(expression string, options dracel.Options) dracel.CompilationResult
}

func compilerFor(cache map[features]compiler, f features) compiler {
	c, ok := cache[f]
	if !ok {
		c = dracel.GetCompiler(dracel.Features{
			EnableConsumableCapacity: f.ConsumableCapacity,
			EnableListTypeAttributes: f.ListTypeAttributes,
		})
		cache[f] = c
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }

func judge(c compiler, in caseIn) (out verdict) {
	out.ID = in.ID
	newEnv := environment.NewExpressions
	result := c.CompileCELExpression(in.Expression, dracel.Options{EnvType: &newEnv})
	if result.Error != nil {
		out.New.Error = ptrTo(result.Error.Error())
	}
	// After a successful compile MaxCost is the estimate, even when it saturates at
	// math.MaxUint64 (an unbounded size): validation refuses that one too.
	if result.Error == nil {
		out.New.Estimate = ptrTo(result.MaxCost)
		out.New.Refused = result.MaxCost > costLimit
	}

	storedEnv := environment.StoredExpressions
	stored := c.CompileCELExpression(in.Expression, dracel.Options{EnvType: &storedEnv, DisableCostEstimation: true})
	if stored.Error != nil {
		out.StoredError = ptrTo(stored.Error.Error())
		return out
	}
	out.Eval = evaluate(stored, in.Device)
	return out
}

func evaluate(program dracel.CompilationResult, d device) (ev *evalVerdict) {
	ev = &evalVerdict{}
	// An internal failure of the library is upstream's answer too: report it as an error.
	defer func() {
		if r := recover(); r != nil {
			ev.Result = nil
			ev.Error = ptrTo(fmt.Sprintf("panic: %v", r))
		}
	}()
	d, err := stored(d)
	if err != nil {
		ev.Error = ptrTo(fmt.Sprintf("device: %v", err))
		return ev
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	matches, details, err := program.DeviceMatches(ctx, dracel.Device{
		Driver:                   d.Driver,
		AllowMultipleAllocations: d.AllowMultipleAllocations,
		Attributes:               d.Attributes,
		Capacity:                 d.Capacity,
	})
	if details != nil {
		ev.ActualCost = details.ActualCost()
	}
	if err != nil {
		ev.Error = ptrTo(err.Error())
	} else {
		ev.Result = &matches
	}
	return ev
}

// stored is the device as the allocator reads it from the API server: quantities come back
// in their canonical form ("1.5Gi" as "1536Mi"), and how a quantity is parsed decides
// what isInteger() says about it.
func stored(d device) (device, error) {
	capacity := make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(d.Capacity))
	for name, c := range d.Capacity {
		data, err := json.Marshal(c)
		if err != nil {
			return d, err
		}
		var back resourceapi.DeviceCapacity
		if err := json.Unmarshal(data, &back); err != nil {
			return d, err
		}
		capacity[name] = back
	}
	d.Capacity = capacity
	return d, nil
}

func versions() map[string]string {
	out := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = info.GoVersion
	out["celCompatibilityVersion"] = environment.DefaultCompatibilityVersion().String()
	for _, m := range info.Deps {
		switch m.Path {
		case "k8s.io/dynamic-resource-allocation", "github.com/google/cel-go", "k8s.io/apiserver":
			out[m.Path] = m.Version
		}
	}
	return out
}

func main() {
	showVersions := flag.Bool("versions", false, "print the module versions as JSON and exit")
	flag.Parse()
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if *showVersions {
		if err := enc.Encode(versions()); err != nil {
			fail(err)
		}
		return
	}
	compilers := map[features]compiler{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	enc = json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for line := 1; in.Scan(); line++ {
		var c caseIn
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fail(fmt.Errorf("stdin line %d: %w", line, err))
		}
		if err := enc.Encode(judge(compilerFor(compilers, c.Features), c)); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
	if err := out.Flush(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "celdiff-upstream:", err)
	os.Exit(1)
}
