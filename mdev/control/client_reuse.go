package control

import (
	"context"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/mdev"
)

// Reuse lists the reuse domains and every instance's reuse counters.
func (c *Client) Reuse(ctx context.Context) (ReuseReply, error) {
	var out ReuseReply
	return out, c.do(ctx, http.MethodGet, "/v1/reuse", nil, &out)
}

// SetReuse changes an instance's reuse domain.
func (c *Client) SetReuse(ctx context.Context, id string, s mdev.ReuseSetting) (InstanceInfo, error) {
	var out InstanceInfo
	return out, c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/reuse", s, &out)
}

// SetReuseBudget pins a reuse domain's byte budget (negative: unpin).
func (c *Client) SetReuseBudget(ctx context.Context, domain string, budget int64) (mdev.ReuseDomainStatus, error) {
	var out mdev.ReuseDomainStatus
	return out, c.do(ctx, http.MethodPut, "/v1/reuse/domains/"+url.PathEscape(domain)+"/budget", BudgetBody{Budget: budget}, &out)
}
