package control

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Stats returns a snapshot of every device's scheduler and every
// instance's counters.
func (c *Client) Stats(ctx context.Context) (StatsReply, error) {
	var out StatsReply
	return out, c.do(ctx, http.MethodGet, "/v1/stats", nil, &out)
}

// Policy returns device's scheduling policy.
func (c *Client) Policy(ctx context.Context, device int) (string, error) {
	var out PolicyBody
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/devices/%d/policy", device), nil, &out)
	return out.Policy, err
}

// SetPolicy switches device's scheduling policy.
func (c *Client) SetPolicy(ctx context.Context, device int, policy string) error {
	return c.do(ctx, http.MethodPut, fmt.Sprintf("/v1/devices/%d/policy", device), PolicyBody{Device: device, Policy: policy}, nil)
}

// SetShare sets an instance's fixed-share weight.
func (c *Client) SetShare(ctx context.Context, id string, share uint32) (InstanceStats, error) {
	var out InstanceStats
	return out, c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/share", ShareBody{Share: share}, &out)
}
