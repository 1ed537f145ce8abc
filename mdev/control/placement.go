package control

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
)

// PlacementBody changes the placement: the policy ("" keeps it, or picks
// interference with a new dataset) and, if set, a dataset to retrain the
// interference model on.
type PlacementBody struct {
	Policy  mdev.PlacementPolicy  `json:"policy,omitempty"`
	Dataset *interference.Dataset `json:"dataset,omitempty"`
}

// ExplainBody asks where an instance of Profile would go.
type ExplainBody struct {
	Profile string         `json:"profile"`
	Hint    mdev.PlaceHint `json:"hint,omitzero"`
}

// maxDatasetBody bounds a PUT /v1/placement body: a dataset and a little.
const maxDatasetBody = interference.MaxDatasetBytes + 4096

// handlePlacement adds the placement endpoints (docs/placement.md):
//
//	GET  /v1/placement                 policy, model, dataset summary
//	PUT  /v1/placement                 {"policy": "...", "dataset": {...}}
//	GET  /v1/placement/dataset         the dataset the model learned from
//	POST /v1/placement/explain         {"profile": "...", "hint": {...}}
func handlePlacement(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("GET /v1/placement", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, m.Placement())
	})
	mux.HandleFunc("PUT /v1/placement", func(w http.ResponseWriter, r *http.Request) {
		var body PlacementBody
		if err := decodeLimit(r, &body, maxDatasetBody); err != nil {
			replyErr(w, fmt.Errorf("set placement: body: %w", err))
			return
		}
		if err := m.SetPlacement(body.Policy, body.Dataset); err != nil {
			replyPlacementErr(w, err)
			return
		}
		reply(w, http.StatusOK, m.Placement())
	})
	mux.HandleFunc("GET /v1/placement/dataset", func(w http.ResponseWriter, r *http.Request) {
		d := m.PlacementDataset()
		if d == nil {
			reply(w, http.StatusNotFound, errorBody{Error: mdev.ErrNoModel.Error()})
			return
		}
		reply(w, http.StatusOK, d)
	})
	mux.HandleFunc("POST /v1/placement/explain", func(w http.ResponseWriter, r *http.Request) {
		var body ExplainBody
		if err := decode(r, &body); err != nil {
			replyErr(w, fmt.Errorf("explain: body: %w", err))
			return
		}
		ex, err := m.Explain(body.Profile, body.Hint)
		if err != nil {
			replyPlacementErr(w, err)
			return
		}
		reply(w, http.StatusOK, ex)
	})
}

func replyPlacementErr(w http.ResponseWriter, err error) {
	if errors.Is(err, mdev.ErrNoModel) {
		reply(w, http.StatusConflict, errorBody{Error: err.Error()})
		return
	}
	replyErr(w, err)
}
