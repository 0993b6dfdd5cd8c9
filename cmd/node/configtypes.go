package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// numericStrings are the configuration keys held as strings that may also
// be written as numbers: sizes, whose unit is optional (1048576 or "1MiB").
var numericStrings = map[string]bool{
	"max_payload": true, "max_output": true, "write_queue_limit": true, "memory_limit": true,
}

// checkConfigTypes refuses a configuration file whose values do not have
// the type of their key (a number for data_dir, a string for
// bootstrap_expect, ...), naming the key, where it is, and the type
// wanted. HCL would otherwise convert some of them silently ("data_dir":
// 5 as the directory "5").
func checkConfigTypes(path string) error {
	p := hclparse.NewParser()
	var (
		f     *hcl.File
		diags hcl.Diagnostics
	)
	if strings.HasSuffix(path, ".json") {
		f, diags = p.ParseJSONFile(path)
	} else {
		f, diags = p.ParseHCLFile(path)
	}
	if diags.HasErrors() {
		return diags
	}
	return checkBodyTypes(f.Body, reflect.TypeOf(fileConfig{}), "")
}

// checkBodyTypes checks the attributes of body against the fields of the
// struct type t (gohcl tags), and its blocks against their types; prefix
// names the enclosing block in messages.
func checkBodyTypes(body hcl.Body, t reflect.Type, prefix string) error {
	schema, _ := gohcl.ImpliedBodySchema(reflect.New(t).Interface())
	content, _, diags := body.PartialContent(schema)
	if diags.HasErrors() {
		// The decoder reports these with its own words.
		return nil
	}
	for i := range t.NumField() {
		field := t.Field(i)
		key, kind, _ := strings.Cut(field.Tag.Get("hcl"), ",")
		switch kind {
		case "block":
			et := field.Type
			for et.Kind() == reflect.Slice || et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			for _, b := range content.Blocks.OfType(key) {
				name := key
				if len(b.Labels) > 0 {
					name = fmt.Sprintf("%s %q", key, b.Labels[0])
				}
				if err := checkBodyTypes(b.Body, et, prefix+name+": "); err != nil {
					return err
				}
			}
			continue
		case "label":
			continue
		}
		attr, ok := content.Attributes[key]
		if !ok {
			continue
		}
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() || !v.IsKnown() || v.IsNull() {
			continue // the decoder reports it
		}
		want, ok := wantType(field.Type, key)
		if ok && !want.accepts(v.Type()) {
			return fmt.Errorf("%s (%s): want %s, got %s", prefix+key, attr.Range.String(), want.words, typeWords(v.Type()))
		}
	}
	return nil
}

// cfgType is what a configuration key accepts.
type cfgType struct {
	words   string // "a string", "a list of strings"
	accepts func(cty.Type) bool
}

// wantType is the type a field of Go type t (key key) accepts.
func wantType(t reflect.Type, key string) (cfgType, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		if numericStrings[key] {
			return cfgType{"a size (a number of bytes, or a string such as \"1MiB\")", func(c cty.Type) bool {
				return c == cty.String || c == cty.Number
			}}, true
		}
		return cfgType{"a string", func(c cty.Type) bool { return c == cty.String }}, true
	case reflect.Int, reflect.Int64, reflect.Float64:
		return cfgType{"a number", func(c cty.Type) bool { return c == cty.Number }}, true
	case reflect.Bool:
		return cfgType{"true or false", func(c cty.Type) bool { return c == cty.Bool }}, true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return cfgType{"a list of strings", func(c cty.Type) bool {
				switch {
				case c.IsTupleType():
					for _, et := range c.TupleElementTypes() {
						if et != cty.String {
							return false
						}
					}
					return true
				case c.IsListType(), c.IsSetType():
					return c.ElementType() == cty.String
				}
				return false
			}}, true
		}
	}
	return cfgType{}, false
}

// typeWords names a value's type for people.
func typeWords(t cty.Type) string {
	switch {
	case t == cty.String:
		return "a string"
	case t == cty.Number:
		return "a number"
	case t == cty.Bool:
		return "a boolean"
	case t.IsTupleType(), t.IsListType(), t.IsSetType():
		return "a list"
	case t.IsObjectType(), t.IsMapType():
		return "an object"
	}
	return t.FriendlyName()
}
