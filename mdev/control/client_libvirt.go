package control

import (
	"context"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/migrate/libvirt"
)

// Attach gives the libvirt domain req.Libvirt instance id's vGPU and
// records it in the domain's metadata (libvirt.Attacher.Attach).
func (c *Client) Attach(ctx context.Context, id string, req AttachRequest) (*libvirt.Report, error) {
	var rep libvirt.Report
	if err := c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/attach", req, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
