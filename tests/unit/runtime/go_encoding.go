//go:build ignore

// Writes go_encoding.json, the reference for operators/gojson.py: what Go's encoding/json
// writes for each float and code point listed, and for a whole document read as the
// Kubernetes unstructured decoder reads it (integers as int64, other numbers as float64).
//
//	go run go_encoding.go > go_encoding.json
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

var floats = []string{"0", "-0", "1", "-1", "0.5", "123", "1e-6", "9.99e-7", "1e-7",
	"1.5e-7", "1e-10", "1.25e-100", "1e15", "1e16", "1.5e16", "1e20", "9.99e20", "1e21",
	"1.5e21", "1e22", "1e300", "5e-324", "0.30000000000000004", "9007199254740992",
	"123456789.125", "1e-5", "0.0001", "12345678901234567890", "-2.5e-9",
	"1.7976931348623157e308", "-123.456", "2.5e-6", "3.0e5"}

var document = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",` +
	`"metadata":{"annotations":{"note":"a <b> & c \u2028 \u2029 \u00e9 \ud83d\ude00 \u007f \t\n"},"name":"c"},` +
	`"spec":{"devices":{"config":[{"opaque":{"driver":"d.example.com","parameters":` +
	`{"big":9223372036854775807,"count":3,"fraction":0.25,"huge":1e21,"list":[1,2.5,-0,1e-7,"x"],` +
	`"nested":{"empty":{},"none":null,"off":false,"on":true},"tiny":0.000001,"whole":2.0}}}],` +
	`"requests":[{"exactly":{"deviceClassName":"gpu"},"name":"r"}]}}}`

func unstructured(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil && !strings.ContainsAny(t.String(), ".eE") {
			return i
		}
		f, err := t.Float64()
		if err != nil {
			panic(err)
		}
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = unstructured(e)
		}
	case []any:
		for i, e := range t {
			t[i] = unstructured(e)
		}
	}
	return v
}

func main() {
	type pair struct {
		In  string `json:"in"`
		Out string `json:"out"`
	}
	var fl []pair
	for _, s := range floats {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			panic(s)
		}
		b, _ := json.Marshal(f)
		fl = append(fl, pair{s, string(b)})
	}
	var cp []pair
	for r := 0; r < 0x80; r++ {
		b, _ := json.Marshal(string(rune(r)))
		cp = append(cp, pair{strconv.Itoa(r), string(b)})
	}
	for _, r := range []int{0x80, 0x9f, 0xa0, 0xe9, 0x2028, 0x2029, 0xfeff, 0xfffd, 0x1f600} {
		b, _ := json.Marshal(string(rune(r)))
		cp = append(cp, pair{strconv.Itoa(r), string(b)})
	}
	decoder := json.NewDecoder(strings.NewReader(document))
	decoder.UseNumber()
	var doc any
	if err := decoder.Decode(&doc); err != nil {
		panic(err)
	}
	written, _ := json.Marshal(unstructured(doc))
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{
		"floats": fl, "codepoints": cp, "document": document, "documentWritten": string(written),
	}); err != nil {
		panic(err)
	}
	fmt.Print(out.String())
}
