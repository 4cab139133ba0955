// Command gorender renders Go text/template cases the way Tinkerbell's workflow controller does, so the
// Python renderer can be compared with Go itself. It reads JSON lines on stdin, each
// {"name": "...", "template": "...", "data": {...}}, and answers each at once with one JSON line:
// {"output": "..."}, {"outputBytes": "<base64>"} when the output is not valid UTF-8, or {"error": "..."}.
// Numbers in data decode as Kubernetes' apimachinery decodes them: whole numbers become int64, all others
// float64.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/template"
	"unicode/utf8"
)

type renderCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data"`
}

type renderResult struct {
	Output      *string `json:"output,omitempty"`
	OutputBytes []byte  `json:"outputBytes,omitempty"`
	Error       *string `json:"error,omitempty"`
}

// The functions Tinkerbell registers for workflow templates, with the same signatures.
var tinkFuncs = template.FuncMap{
	"contains":        strings.Contains,
	"hasPrefix":       strings.HasPrefix,
	"hasSuffix":       strings.HasSuffix,
	"formatPartition": formatPartition,
}

func formatPartition(dev string, partition int) string {
	if strings.HasPrefix(dev, "/dev/nvme") {
		return fmt.Sprintf("%vp%v", dev, partition)
	}
	for _, prefix := range []string{"/dev/sd", "/dev/vd", "/dev/xvd", "/dev/hd"} {
		if strings.HasPrefix(dev, prefix) {
			return fmt.Sprintf("%v%v", dev, partition)
		}
	}
	return dev
}

func normalise(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		if err != nil {
			panic(err)
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normalise(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
		return x
	}
	return v
}

func render(c renderCase) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	dec := json.NewDecoder(bytes.NewReader(c.Data))
	dec.UseNumber()
	var data map[string]any
	if err := dec.Decode(&data); err != nil {
		return "", fmt.Errorf("bad case data: %w", err)
	}
	normalise(data)
	name := c.Name
	if name == "" {
		name = "action"
	}
	tmpl, err := template.New(name).Option("missingkey=error").Funcs(tinkFuncs).Parse(c.Template)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for in.Scan() {
		var c renderCase
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "bad case:", err)
			os.Exit(2)
		}
		var res renderResult
		text, err := render(c)
		if err != nil {
			msg := err.Error()
			res.Error = &msg
		} else if utf8.ValidString(text) {
			res.Output = &text
		} else {
			res.OutputBytes = []byte(text)
		}
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(2)
		}
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
		os.Exit(2)
	}
}
