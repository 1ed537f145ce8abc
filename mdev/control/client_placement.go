package control

import (
	"context"
	"net/http"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
)

// Placement returns the placement policy and what its model learned from.
func (c *Client) Placement(ctx context.Context) (mdev.PlacementStatus, error) {
	var out mdev.PlacementStatus
	return out, c.do(ctx, http.MethodGet, "/v1/placement", nil, &out)
}

// SetPlacement changes the placement policy and, with a dataset, retrains
// the interference model.
func (c *Client) SetPlacement(ctx context.Context, body PlacementBody) (mdev.PlacementStatus, error) {
	var out mdev.PlacementStatus
	return out, c.do(ctx, http.MethodPut, "/v1/placement", body, &out)
}

// PlacementDataset returns the dataset the interference model learned
// from.
func (c *Client) PlacementDataset(ctx context.Context) (*interference.Dataset, error) {
	var out interference.Dataset
	if err := c.do(ctx, http.MethodGet, "/v1/placement/dataset", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Explain says where the daemon would place an instance of profile now.
func (c *Client) Explain(ctx context.Context, profile string, hint mdev.PlaceHint) (mdev.Explanation, error) {
	var out mdev.Explanation
	return out, c.do(ctx, http.MethodPost, "/v1/placement/explain", ExplainBody{Profile: profile, Hint: hint}, &out)
}
