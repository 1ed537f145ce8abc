package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/definitions"
)

// WithDefinitions enables /v1/definitions: the persistent instance
// definitions in dir (vgpuctl define, undefine, definitions).
func WithDefinitions(dir definitions.Dir) Option {
	return func(o *options) { o.defs = &dir }
}

// DefinitionsReply lists the definitions; Errors are the files that could
// not be used.
type DefinitionsReply struct {
	Dir         string                   `json:"dir"`
	Definitions []definitions.Definition `json:"definitions"`
	Errors      []string                 `json:"errors,omitempty"`
}

// DefineReply is a definition written, and the instance created from it
// (?create=1) if one was.
type DefineReply struct {
	Definition definitions.Definition `json:"definition"`
	Created    string                 `json:"created,omitempty"`
}

func handleDefinitions(mux *http.ServeMux, m *mdev.Manager, dir *definitions.Dir) {
	if dir == nil {
		return
	}
	mux.HandleFunc("GET /v1/definitions", func(w http.ResponseWriter, r *http.Request) {
		defs, bad, err := dir.List()
		if err != nil {
			replyErr(w, err)
			return
		}
		out := DefinitionsReply{Dir: string(*dir), Definitions: defs}
		if out.Definitions == nil {
			out.Definitions = []definitions.Definition{}
		}
		for _, b := range bad {
			out.Errors = append(out.Errors, b.Error())
		}
		reply(w, http.StatusOK, out)
	})
	mux.HandleFunc("PUT /v1/definitions/{name}", func(w http.ResponseWriter, r *http.Request) {
		var d definitions.Definition
		if err := decode(r, &d); err != nil {
			replyErr(w, fmt.Errorf("define: body: %w", err))
			return
		}
		if d.Name == "" {
			d.Name = r.PathValue("name")
		}
		if d.Name != r.PathValue("name") {
			replyErr(w, fmt.Errorf("define: %w: the body names %q, the path %q", definitions.ErrBadDefinition, d.Name, r.PathValue("name")))
			return
		}
		// A definition names no other instance: its name or UUID may be
		// an existing instance's only if that instance is the one defined.
		if id, err := m.Resolve(d.Name); err == nil && d.UUID != "" && id != d.UUID {
			replyErr(w, fmt.Errorf("define %s: %w: instance %s has the name", d.Name, mdev.ErrExists, id))
			return
		}
		d, err := dir.Put(d)
		if err != nil {
			replyErr(w, err)
			return
		}
		out := DefineReply{Definition: d}
		if r.URL.Query().Get("create") == "1" {
			created, err := definitions.Apply(m, []definitions.Definition{d})
			if err != nil {
				replyErr(w, fmt.Errorf("defined in %s, but: %w", *dir, err))
				return
			}
			if len(created) == 1 {
				out.Created = created[0]
			}
		}
		reply(w, http.StatusOK, out)
	})
	mux.HandleFunc("DELETE /v1/definitions/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := dir.Delete(r.PathValue("name")); err != nil {
			if errors.Is(err, definitions.ErrNoDefinition) {
				reply(w, http.StatusNotFound, errorBody{Error: err.Error()})
				return
			}
			replyErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// Definitions lists the daemon's persistent definitions.
func (c *Client) Definitions(ctx context.Context) (DefinitionsReply, error) {
	var out DefinitionsReply
	return out, c.do(ctx, http.MethodGet, "/v1/definitions", nil, &out)
}

// Define writes a persistent definition; create also creates its
// instance now if it does not exist.
func (c *Client) Define(ctx context.Context, d definitions.Definition, create bool) (DefineReply, error) {
	var out DefineReply
	path := "/v1/definitions/" + url.PathEscape(d.Name)
	if create {
		path += "?create=1"
	}
	return out, c.do(ctx, http.MethodPut, path, d, &out)
}

// Undefine removes a persistent definition (its instance, if any, stays).
func (c *Client) Undefine(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/definitions/"+url.PathEscape(name), nil, nil)
}
