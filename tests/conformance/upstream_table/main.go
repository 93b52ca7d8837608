// Command upstream-table runs dralloc's port of upstream's structured-allocator table
// (tests/conformance/test_allocator_upstream.py) through upstream's own allocator, the module
// this program is built with. The Python side writes one JSON case per line on stdin; this
// program answers one JSON line per case: the allocation results or the error, and how often
// the search tried a device (where the allocator counts it). A test compares the answers with
// the port's expectations, so the port keeps saying what upstream says, and building against
// a newer module shows which cases upstream changed. With -versions it prints the module
// versions it was built with. Upstream keeps three implementations of its allocator; the
// experimental one, which has every feature, answers unless -allocator names another.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// consumed is capacity already taken from one device by earlier allocations.
type consumed struct {
	Device   [3]string                    `json:"device"`
	Capacity map[string]resource.Quantity `json:"capacity"`
}

// tableCase is one entry of the port, as the Python side writes it.
type tableCase struct {
	Name              string                       `json:"name"`
	Features          map[string]bool              `json:"features"`
	Node              *v1.Node                     `json:"node"`
	Classes           []*resourceapi.DeviceClass   `json:"classes"`
	Slices            []*resourceapi.ResourceSlice `json:"slices"`
	Claims            []*resourceapi.ResourceClaim `json:"claims"`
	Allocated         [][3]string                  `json:"allocated"`
	AllocatedCapacity []consumed                   `json:"allocatedCapacity"`
}

type answer struct {
	Name    string                         `json:"name"`
	Results []map[string]any `json:"results"`
	Error   *string                        `json:"error"`
	// Steps is the allocator's count of devices tried, where it keeps one (else null).
	Steps *int64 `json:"steps"`
}

type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// features sets the fields of structured.Features named in the case; an unknown name is an
// error, so a feature this module version lacks is reported instead of silently off.
func features(names map[string]bool) (structured.Features, error) {
	var f structured.Features
	value := reflect.ValueOf(&f).Elem()
	for name, on := range names {
		field := value.FieldByName(name)
		if !field.IsValid() || field.Kind() != reflect.Bool {
			return f, fmt.Errorf("this allocator has no feature %q", name)
		}
		field.SetBool(on)
	}
	return f, nil
}

// steps reads the allocator's statistics where its implementation keeps them; the type is in
// an internal package, so it is read by name.
func steps(allocator structured.Allocator) *int64 {
	method := reflect.ValueOf(allocator).MethodByName("GetStats")
	if !method.IsValid() || method.Type().NumIn() != 0 || method.Type().NumOut() != 1 {
		return nil
	}
	stats := method.Call(nil)[0]
	if stats.Kind() == reflect.Pointer {
		stats = stats.Elem()
	}
	if stats.Kind() != reflect.Struct {
		return nil
	}
	count := stats.FieldByName("NumAllocateOneInvocations")
	if !count.IsValid() || !count.CanInt() {
		return nil
	}
	n := count.Int()
	return &n
}

func run(ctx context.Context, c tableCase) answer {
	out := answer{Name: c.Name}
	fail := func(err error) answer {
		text := err.Error()
		out.Error = &text
		out.Results = nil
		return out
	}
	f, err := features(c.Features)
	if err != nil {
		return fail(err)
	}
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, d := range c.Allocated {
		state.AllocatedDevices.Insert(structured.MakeDeviceID(d[0], d[1], d[2]))
	}
	for _, used := range c.AllocatedCapacity {
		amounts := map[resourceapi.QualifiedName]resource.Quantity{}
		for name, q := range used.Capacity {
			amounts[resourceapi.QualifiedName(name)] = q
		}
		id := structured.MakeDeviceID(used.Device[0], used.Device[1], used.Device[2])
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, amounts))
	}
	cache := cel.NewCache(1, cel.Features{
		EnableConsumableCapacity: f.ConsumableCapacity,
		EnableListTypeAttributes: f.ListTypeAttributes,
	})
	allocator, err := structured.NewAllocator(ctx, f, state, classLister(c.Classes), c.Slices, cache)
	if err != nil {
		return fail(err)
	}
	results, err := allocator.Allocate(ctx, c.Node, c.Claims)
	out.Steps = steps(allocator)
	if err != nil {
		return fail(err)
	}
	out.Results = make([]map[string]any, 0, len(results))
	for i := range results {
		exact, err := exactJSON(&results[i])
		if err != nil {
			return fail(err)
		}
		out.Results = append(out.Results, exact)
	}
	return out
}

// exactJSON is the result as JSON, with each consumed capacity as its exact decimal value: a
// Quantity above the largest SI suffix is written in a short form that reads back as another
// amount (10^21 marshals as "1"), which would make the comparison wrong, not the allocator.
func exactJSON(result *resourceapi.AllocationResult) (map[string]any, error) {
	data, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	devices, _ := out["devices"].(map[string]any)
	items, _ := devices["results"].([]any)
	for i, item := range items {
		entry, _ := item.(map[string]any)
		consumed := result.Devices.Results[i].ConsumedCapacity
		if entry == nil || len(consumed) == 0 {
			continue
		}
		amounts := map[string]string{}
		for name, q := range consumed {
			amounts[string(name)] = q.AsDec().String()
		}
		entry["consumedCapacity"] = amounts
	}
	return out, nil
}

func versions() map[string]string {
	out := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = info.GoVersion
	for _, m := range info.Deps {
		switch m.Path {
		case "k8s.io/dynamic-resource-allocation", "k8s.io/api":
			out[m.Path] = m.Version
		}
	}
	return out
}

func main() {
	showVersions := flag.Bool("versions", false, "print the module versions as JSON and exit")
	implementation := flag.String("allocator", "experimental",
		"which of upstream's implementations answers (stable, incubating, experimental): "+
			"dralloc has every feature, as the experimental one")
	flag.Parse()
	structured.EnableAllocators(*implementation)
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if *showVersions {
		if err := enc.Encode(versions()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	ctx := context.Background()
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		var c tableCase
		if err := json.Unmarshal(scanner.Bytes(), &c); err != nil {
			fmt.Fprintf(os.Stderr, "bad case: %v\n", err)
			os.Exit(1)
		}
		if err := enc.Encode(run(ctx, c)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
