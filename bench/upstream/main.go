// Command upstream-bench replays a dralloc benchmark scenario through the upstream structured
// allocator (k8s.io/dynamic-resource-allocation/structured), the way kube-scheduler's
// DynamicResources plugin uses it: per pod, a fresh allocator over the current allocated
// state and all slices (PreFilter), then Allocate on the nodes in order until one fits
// (Filter), and the result counted as allocated at once (the assume cache).
//
// The scenario is the expanded JSON written by bench/scenario.py, so this program and the
// Python harness place exactly the same pods on exactly the same objects. It prints one JSON
// object: pods placed, seconds, pods/s for the measured steps, and a digest of the placements
// (with -devices, also the devices each step's pod got; with -times, the seconds each step
// took).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type step struct {
	Pod       string                       `json:"pod"`
	Claims    []string                     `json:"claims"`
	NewClaims []*resourceapi.ResourceClaim `json:"newClaims"`
	Release   []string                     `json:"release"`
}

type scenario struct {
	Name         string                       `json:"name"`
	Nodes        []*v1.Node                   `json:"nodes"`
	Slices       []*resourceapi.ResourceSlice `json:"slices"`
	Classes      []*resourceapi.DeviceClass   `json:"classes"`
	SharedClaims []*resourceapi.ResourceClaim `json:"sharedClaims"`
	Preallocated []*resourceapi.ResourceClaim `json:"preallocated"`
	InitSteps    []step                       `json:"initSteps"`
	MeasureSteps []step                       `json:"measureSteps"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// cluster is the scheduler's view: claims by key, and the set of allocated devices that its
// allocated-devices tracker keeps up to date from claim events.
type cluster struct {
	claims    map[string]*resourceapi.ResourceClaim
	allocated sets.Set[structured.DeviceID]
}

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

func (c *cluster) setAllocation(claim *resourceapi.ResourceClaim, result *resourceapi.AllocationResult) {
	claim.Status.Allocation = result
	for _, r := range result.Devices.Results {
		c.allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	}
}

func (c *cluster) remove(key string) {
	claim, ok := c.claims[key]
	if !ok {
		return
	}
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			c.allocated.Delete(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	delete(c.claims, key)
}

type runner struct {
	ctx      context.Context
	scenario *scenario
	classes  classLister
	cluster  *cluster
	celCache *cel.Cache
	features structured.Features
	nodeName map[*v1.Node]string
	// devices, when not nil, gets per step the devices the pod's new allocations hold
	// ("driver/pool/device"; empty when it was not placed or needed none).
	devices *[][]string
	// times, when not nil, gets per step the seconds the step took (release, claims, search).
	times *[]float64
}

// place runs one pod: it returns the chosen node name, or "" when no node fits.
func (r *runner) place(s step) (string, error) {
	for _, key := range s.Release {
		r.cluster.remove(key)
	}
	for _, claim := range s.NewClaims {
		r.cluster.claims[claimKey(claim)] = claim
	}
	var pending []*resourceapi.ResourceClaim
	var pinned []*v1.NodeSelector
	for _, key := range s.Claims {
		claim, ok := r.cluster.claims[key]
		if !ok {
			return "", fmt.Errorf("pod %s: claim %s does not exist", s.Pod, key)
		}
		if claim.Status.Allocation == nil {
			pending = append(pending, claim)
		} else if claim.Status.Allocation.NodeSelector != nil {
			pinned = append(pinned, claim.Status.Allocation.NodeSelector)
		}
	}
	var allocator structured.Allocator
	if len(pending) > 0 {
		// PreFilter: the tracker hands out a copy of the allocated set (plus in-flight
		// claims, none here), and a new allocator is built over every slice.
		state := structured.AllocatedState{
			AllocatedDevices:         r.cluster.allocated.Clone(),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		}
		var err error
		allocator, err = structured.NewAllocator(r.ctx, r.features, state, r.classes, r.scenario.Slices, r.celCache)
		if err != nil {
			return "", err
		}
	}
	for _, node := range r.scenario.Nodes {
		if !matchesAll(r.features, node, pinned) {
			continue
		}
		if allocator == nil {
			r.record(nil)
			return node.Name, nil
		}
		results, err := allocator.Allocate(r.ctx, node, pending)
		if err != nil {
			return "", fmt.Errorf("pod %s on node %s: %w", s.Pod, node.Name, err)
		}
		if results == nil {
			continue
		}
		var taken []string
		for i, claim := range pending {
			result := results[i]
			r.cluster.setAllocation(claim, &result)
			for _, d := range result.Devices.Results {
				taken = append(taken, d.Driver+"/"+d.Pool+"/"+d.Device)
			}
		}
		r.record(taken)
		return node.Name, nil
	}
	r.record(nil)
	return "", nil
}

func (r *runner) record(taken []string) {
	if r.devices != nil {
		if taken == nil {
			taken = []string{}
		}
		*r.devices = append(*r.devices, taken)
	}
}

// warmUp places one pod's new claims without keeping the result, so that one-off costs (CEL
// environment and selector compilation) are not counted as throughput; the Python harness
// does the same.
func (r *runner) warmUp(s step) error {
	if len(s.NewClaims) == 0 {
		return nil
	}
	state := structured.AllocatedState{
		AllocatedDevices:         r.cluster.allocated.Clone(),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	allocator, err := structured.NewAllocator(r.ctx, r.features, state, r.classes, r.scenario.Slices, r.celCache)
	if err != nil {
		return err
	}
	for _, node := range r.scenario.Nodes {
		results, err := allocator.Allocate(r.ctx, node, s.NewClaims)
		if err != nil {
			return err
		}
		if results != nil {
			return nil
		}
	}
	return nil
}

func matchesAll(features structured.Features, node *v1.Node, selectors []*v1.NodeSelector) bool {
	for _, sel := range selectors {
		ok, err := structured.NodeMatches(features, node, "", false, sel)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

type phaseResult struct {
	Pods          int     `json:"pods"`
	Unschedulable int     `json:"unschedulable"`
	Seconds       float64 `json:"seconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
}

func (r *runner) run(steps []step, placements *[]string) (phaseResult, error) {
	var res phaseResult
	start := time.Now()
	for _, s := range steps {
		began := time.Now()
		node, err := r.place(s)
		if err != nil {
			return res, err
		}
		if r.times != nil {
			*r.times = append(*r.times, time.Since(began).Seconds())
		}
		if node == "" {
			res.Unschedulable++
		} else {
			res.Pods++
		}
		*placements = append(*placements, s.Pod+"="+node)
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.PodsPerSecond = float64(res.Pods) / res.Seconds
	}
	return res, nil
}

func main() {
	path := flag.String("scenario", "", "expanded scenario JSON (bench/scenario.py)")
	withDevices := flag.Bool("devices", false, "also print the devices each step's pod got")
	withTimes := flag.Bool("times", false, "also print the seconds each step took")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "usage: upstream-bench -scenario FILE")
		os.Exit(2)
	}
	data, err := os.ReadFile(*path)
	if err != nil {
		fail(err)
	}
	var sc scenario
	if err := json.Unmarshal(data, &sc); err != nil {
		fail(fmt.Errorf("parse %s: %w", *path, err))
	}
	// The features dralloc implements, which select upstream's "incubating" allocator (as in
	// the comparison against v0.36.3). kube-scheduler 1.37's default gates add
	// CompatibilityGroups, DerivedAttributes and OptionalNodeOperations, which only the
	// "experimental" allocator supports; the scenarios use none of them.
	features := structured.Features{
		AdminAccess:            true,
		PrioritizedList:        true,
		PartitionableDevices:   true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
	r := &runner{
		ctx:      context.Background(),
		scenario: &sc,
		classes:  classLister{},
		cluster:  &cluster{claims: map[string]*resourceapi.ResourceClaim{}, allocated: sets.New[structured.DeviceID]()},
		celCache: cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}),
		features: features,
	}
	for _, c := range sc.Classes {
		r.classes[c.Name] = c
	}
	var devices [][]string
	if *withDevices {
		r.devices = &devices
	}
	var times []float64
	if *withTimes {
		r.times = &times
	}
	for _, c := range sc.SharedClaims {
		r.cluster.claims[claimKey(c)] = c
	}
	for _, c := range sc.Preallocated {
		r.cluster.claims[claimKey(c)] = c
		r.cluster.setAllocation(c, c.Status.Allocation)
	}
	var placements []string
	if len(sc.InitSteps) > 0 {
		if err := r.warmUp(sc.InitSteps[0]); err != nil {
			fail(err)
		}
	}
	initRes, err := r.run(sc.InitSteps, &placements)
	if err != nil {
		fail(err)
	}
	if len(sc.MeasureSteps) > 0 {
		if err := r.warmUp(sc.MeasureSteps[0]); err != nil {
			fail(err)
		}
	}
	runtime.GC()
	// What the program holds with the cluster loaded and the init steps placed (the
	// scenario's objects and the allocator's state), as dralloc's side measures it.
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	measureRes, err := r.run(sc.MeasureSteps, &placements)
	if err != nil {
		fail(err)
	}
	digest := sha256.Sum256([]byte(strings.Join(placements, "\n")))
	out := map[string]any{
		"name":      sc.Name,
		"engine":    "upstream",
		"allocator": "k8s.io/dynamic-resource-allocation/structured",
		"init":      initRes,
		"measure":   measureRes,
		"digest":    hex.EncodeToString(digest[:])[:16],
		"goVersion": runtime.Version(),
		"heapBytes": mem.HeapAlloc,
	}
	if *withDevices {
		out["devices"] = devices
	}
	if *withTimes {
		out["times"] = times
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "upstream-bench:", err)
	os.Exit(1)
}
