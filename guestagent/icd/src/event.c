/* event.c: commands and events.
 *
 * Every enqueued command is an event (internal when the application did
 * not ask for one) carrying the daemon request and what to do when it
 * completes (copy a read out of the arena, free arena ranges). A command
 * is sent to the daemon at once, unless its queue already holds commands
 * back or its wait list names an event that is not on its way: a user
 * event not yet set, or a command held back itself. Such commands wait in
 * their queue's held list, in order, and are sent when clSetUserEventStatus
 * (or the sending of what they wait for) makes them ready; a command whose
 * wait list holds a failed event fails with
 * CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST without running. Everything
 * sent is in order on the connection, so a sent event is as good as a
 * completed one for the wait lists of later commands.
 *
 * The daemon reports completions only when asked (Wait, Poll): the ICD
 * asks when the application waits (clWaitForEvents, clFinish, a blocking
 * command), queries a status, needs arena room, or has too many events in
 * flight; and a helper thread polls while callbacks wait for events. */
#define _GNU_SOURCE
#include "icd.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_EVERY 256     /* sends between opportunistic polls */
#define PENDING_HIGH 16384 /* events in flight before the ICD polls */
#define PENDING_MAX 60000  /* ... and before it waits (the daemon keeps 65536) */

static size_t bucket_of(uint64_t id)
{
	return (size_t)(id * 0x9E3779B97F4A7C15ull >> 52) & (VGPU_EVENT_BUCKETS - 1);
}

static void pending_add(cl_context ctx, struct _cl_event *ev)
{
	ev->pnext = NULL;
	ev->pprev = ctx->pend_tail;
	if (ctx->pend_tail != NULL)
		ctx->pend_tail->pnext = ev;
	else
		ctx->pend_head = ev;
	ctx->pend_tail = ev;
	size_t b = bucket_of(ev->id);
	ev->hnext = ctx->bucket[b];
	ctx->bucket[b] = ev;
	ctx->npending++;
	ev->pending = 1;
}

static void pending_remove(cl_context ctx, struct _cl_event *ev)
{
	if (ev->pprev != NULL)
		ev->pprev->pnext = ev->pnext;
	else
		ctx->pend_head = ev->pnext;
	if (ev->pnext != NULL)
		ev->pnext->pprev = ev->pprev;
	else
		ctx->pend_tail = ev->pprev;
	for (struct _cl_event **pp = &ctx->bucket[bucket_of(ev->id)]; *pp != NULL; pp = &(*pp)->hnext) {
		if (*pp == ev) {
			*pp = ev->hnext;
			break;
		}
	}
	ev->pnext = ev->pprev = ev->hnext = NULL;
	ctx->npending--;
	ev->pending = 0;
}

static struct _cl_event *pending_find(cl_context ctx, uint64_t id)
{
	for (struct _cl_event *e = ctx->bucket[bucket_of(id)]; e != NULL; e = e->hnext)
		if (e->id == id)
			return e;
	return NULL;
}

static void xfer_free(struct vgpu_xfer *x)
{
	if (x != NULL)
		free(x->segs);
	free(x);
}

struct _cl_event *vgpu_event_new(cl_context ctx, cl_command_queue q, cl_command_type type)
{
	struct _cl_event *ev = calloc(1, sizeof *ev);
	if (ev == NULL)
		return NULL;
	vgpu_obj_init(&ev->obj, VGPU_EVENT);
	ev->ctx = ctx;
	IREF(ctx);
	ev->queue = q;
	if (q != NULL)
		IREF(q);
	ev->type = type;
	ev->status = CL_QUEUED;
	ev->id = ++ctx->next_event;
	ev->t_queued = vgpu_now_ns();
	return ev;
}

void vgpu_event_destroy(cl_event ev)
{
	cl_context ctx = ev->ctx;
	ctx_lock(ctx);
	for (cl_uint i = 0; i < ev->nwait; i++)
		PUT(ev->wait[i]);
	free(ev->wait);
	for (cl_uint i = 0; i < ev->nmems; i++)
		PUT(ev->mems[i]);
	free(ev->mems);
	free(ev->msg);
	free(ev->out);
	xfer_free(ev->xfer);
	if (ev->hm != NULL)
		vgpu_hostmem_put(ev->hm);
	if (ev->parent != NULL)
		PUT(ev->parent);
	arena_free(ctx, &ev->copy_src);
	arena_free(ctx, &ev->free1);
	arena_free(ctx, &ev->free2);
	while (ev->cbs != NULL) {
		struct vgpu_evcb *n = ev->cbs->next;
		free(ev->cbs);
		ev->cbs = n;
	}
	cl_command_queue q = ev->queue;
	free(ev);
	if (q != NULL)
		PUT(q);
	ctx_unlock(ctx);
	PUT(ctx);
}

cl_int vgpu_status_error(uint32_t status, cl_command_type type)
{
	switch (status) {
	case VGPU_STATUS_OK: return CL_COMPLETE;
	case VGPU_STATUS_QUOTA_EXCEEDED:
	case VGPU_STATUS_OUT_OF_RESOURCES:
		return type == 0 ? CL_MEM_OBJECT_ALLOCATION_FAILURE : CL_OUT_OF_RESOURCES;
	case VGPU_STATUS_BUILD_FAILED: return CL_BUILD_PROGRAM_FAILURE;
	default: return CL_OUT_OF_RESOURCES;
	}
}

/* Queue the callbacks ev's new status calls. */
static void fire_callbacks(struct _cl_event *ev)
{
	struct vgpu_evcb **pp = &ev->cbs;
	while (*pp != NULL) {
		struct vgpu_evcb *cb = *pp;
		/* A callback for a status fires when the event reaches it or a
		 * later one (CL_COMPLETE is 0, below CL_RUNNING and CL_SUBMITTED),
		 * or fails. */
		if (ev->status <= cb->type) {
			IREF(ev);
			vgpu_defer(ev->ctx, DEFER_EVENT, ev, (void (*)(void))cb->fn, cb->data,
				   ev->status < 0 ? ev->status : cb->type);
			*pp = cb->next;
			free(cb);
		} else {
			pp = &cb->next;
		}
	}
	if (ev->cbs == NULL && ev->in_progress_list) {
		ev->in_progress_list = 0;
		ev->ctx->ncallback_events--;
	}
}

/* chunk_done: a chunk of a staged transfer completed; tell its command. */
static void chunk_done(struct _cl_event *c, cl_int status)
{
	struct _cl_event *p = c->parent;
	if (!p->have_first) {
		p->have_first = 1;
		p->t_first_submit = c->t_submit;
		p->t_first_start = c->t_start;
	}
	if (status != CL_COMPLETE && p->chunk_err == 0)
		p->chunk_err = status;
	for (struct _cl_event **pp = &p->chunks; *pp != NULL; pp = &(*pp)->chunk_next) {
		if (*pp == c) {
			*pp = c->chunk_next;
			break;
		}
	}
	c->chunk_next = NULL;
	c->parent = NULL;
	PUT(p);
}

/* wait_chunks asks the daemon about ev's chunks still outstanding (before
 * ev completes: they ran before it), so that their bytes are copied out. */
static void wait_chunks(struct _cl_event *ev)
{
	cl_context ctx = ev->ctx;
	while (ev->chunks != NULL && conn_ok(ctx)) {
		struct _cl_event *cs[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		for (struct _cl_event *c = ev->chunks; c != NULL && k < VGPU_ICDP_MAX_WAIT_EVENTS; c = c->chunk_next)
			cs[k++] = c;
		struct _cl_event *first = ev->chunks;
		vgpu_ask(ctx, VGPU_ICDP_OP_WAIT, k, cs);
		if (ev->chunks == first && first->status > CL_COMPLETE)
			break; /* no progress (the daemon's timeout): do not spin */
	}
}

/* drop_refs releases what ev holds until it is sent or done: the events
 * it waits for and the memory objects its command uses. */
static void drop_refs(struct _cl_event *ev)
{
	for (cl_uint i = 0; i < ev->nwait; i++)
		PUT(ev->wait[i]);
	free(ev->wait);
	ev->wait = NULL;
	ev->nwait = 0;
	for (cl_uint i = 0; i < ev->nmems; i++)
		PUT(ev->mems[i]);
	free(ev->mems);
	ev->mems = NULL;
	ev->nmems = 0;
}

void vgpu_event_done(struct _cl_event *ev, cl_int status, const void *record)
{
	cl_context ctx = ev->ctx;
	if (ev->status <= CL_COMPLETE)
		return;
	if (ev->chunks != NULL && !ev->sent) {
		/* Chunks that never left with ev's message end with it. */
		for (struct _cl_event *c = ev->chunks, *next; c != NULL; c = next) {
			next = c->chunk_next;
			if (!c->sent)
				vgpu_event_done(c, status == CL_COMPLETE ? CL_OUT_OF_RESOURCES : status, NULL);
		}
	}
	if (ev->chunks != NULL) {
		/* Completing them may complete ev itself (a lost connection). */
		wait_chunks(ev);
		if (ev->status <= CL_COMPLETE)
			return;
		if (status == CL_COMPLETE && ev->chunk_err != 0)
			status = ev->chunk_err;
	}
	const struct vgpu_icdp_event_record *rec = record;
	if (rec != NULL) {
		ev->t_submit = rec->submit_ns;
		ev->t_start = rec->start_ns;
		ev->t_end = rec->end_ns;
	} else {
		ev->t_submit = ev->t_start = ev->t_end = vgpu_now_ns();
	}
	if (ev->have_first) {
		/* A chunked transfer: from its first chunk to its last. */
		if (ev->t_first_submit < ev->t_submit)
			ev->t_submit = ev->t_first_submit;
		ev->t_start = ev->t_first_start;
	}
	/* Profiling times never go backwards. */
	if (ev->t_submit < ev->t_queued)
		ev->t_submit = ev->t_queued;
	if (ev->t_start < ev->t_submit)
		ev->t_start = ev->t_submit;
	if (ev->t_end < ev->t_start)
		ev->t_end = ev->t_start;
	if (ev->pending)
		pending_remove(ctx, ev);
	if (status == CL_COMPLETE && ev->out != NULL) {
		const uint8_t *src = arena_ptr(ctx, &ev->copy_src);
		for (size_t i = 0; i < ev->nout; src += ev->out[i].len, i++)
			memcpy(ev->out[i].host, src, ev->out[i].len);
	}
	if (status == CL_COMPLETE && ev->printout)
		vgpu_printout(arena_ptr(ctx, &ev->copy_src), ev->copy_src.len);
	free(ev->out);
	ev->out = NULL;
	ev->nout = 0;
	xfer_free(ev->xfer);
	ev->xfer = NULL;
	if (ev->hm != NULL)
		vgpu_hostmem_put(ev->hm);
	ev->hm = NULL;
	if (ev->parent != NULL)
		chunk_done(ev, status);
	arena_free(ctx, &ev->copy_src);
	arena_free(ctx, &ev->free1);
	arena_free(ctx, &ev->free2);
	drop_refs(ev);
	free(ev->msg);
	ev->msg = NULL;
	ev->status = status;
	fire_callbacks(ev);
	pthread_cond_broadcast(&ctx->cv);
	PUT(ev); /* the command's own reference */
}

/* ---- Staged transfers ----------------------------------------------- */

/* chunk_alloc: an arena range for the next chunk, want bytes or, when the
 * arena is too fragmented (mappings live in it), fewer: *got. */
static int chunk_alloc(cl_context ctx, uint64_t want, struct vgpu_range *r, uint64_t *got)
{
	for (;;) {
		if (arena_alloc(ctx, want, r) == CL_SUCCESS) {
			*got = want;
			return 0;
		}
		if (!conn_ok(ctx) || want <= (64u << 10))
			return -1;
		want /= 2;
	}
}

/* send_chunk sends the requests of one chunk of ev's transfer, got bytes
 * staged in r, for c (ev itself for the last chunk, else a chunk event).
 * 0, or -1 when the connection failed. */
static int send_chunk(struct _cl_event *ev, struct _cl_event *c, const struct vgpu_range *r, uint64_t got)
{
	cl_context ctx = ev->ctx;
	struct vgpu_xfer *x = ev->xfer;
	/* Count the pieces first, for a read's copy-out list. */
	size_t n = 0;
	{
		size_t seg = x->seg;
		uint64_t pos = x->pos, need = got;
		while (need > 0) {
			uint64_t l = x->segs[seg].len - pos;
			if (l > need)
				l = need;
			n++;
			need -= l;
			pos += l;
			if (pos == x->segs[seg].len) {
				seg++;
				pos = 0;
			}
		}
	}
	if (!x->write) {
		c->out = calloc(n, sizeof *c->out);
		if (c->out == NULL)
			return -2;
		c->nout = n;
		c->copy_src = *r;
	} else {
		c->free1 = *r;
	}
	uint8_t *a = arena_ptr(ctx, r);
	uint64_t aoff = 0;
	for (size_t i = 0; i < n; i++) {
		const struct vgpu_seg *sg = &x->segs[x->seg];
		uint64_t l = sg->len - x->pos;
		if (l > got - aoff)
			l = got - aoff;
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_transfer b;
		} m = {.b = {.buffer = x->buffer,
			     .arena = r->arena,
			     .offset = sg->dev_off + x->pos,
			     .arena_offset = r->off + aoff,
			     .length = l,
			     .event = i + 1 == n ? c->id : 0}};
		conn_hdr(ctx, &m, x->write ? VGPU_ICDP_OP_WRITE : VGPU_ICDP_OP_READ, sizeof m);
		if (x->write)
			memcpy(a + aoff, sg->host + x->pos, l);
		else
			c->out[i] = (struct vgpu_seg){.dev_off = sg->dev_off + x->pos, .host = sg->host + x->pos, .len = l};
		if (conn_send(ctx, &m, sizeof m) != 0)
			return -1;
		aoff += l;
		x->pos += l;
		if (x->pos == sg->len) {
			x->seg++;
			x->pos = 0;
		}
	}
	x->left -= got;
	return 0;
}

/* send_xfer sends ev's staged transfer: chunk after chunk, each waiting
 * for arena room (the oldest commands, earlier chunks among them, give
 * it back). 0 when everything is sent (ev's own request last), or -1
 * when ev was completed with an error. */
static int send_xfer(struct _cl_event *ev)
{
	cl_context ctx = ev->ctx;
	struct vgpu_xfer *x = ev->xfer;
	cl_int err = CL_OUT_OF_RESOURCES;
	while (x->left > 0) {
		struct vgpu_range r;
		uint64_t got;
		if (chunk_alloc(ctx, x->left < VGPU_CHUNK ? x->left : VGPU_CHUNK, &r, &got) != 0) {
			err = conn_ok(ctx) ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
			goto fail;
		}
		if (got == x->left) {
			/* The last chunk: the command's own request. */
			int rc = send_chunk(ev, ev, &r, got);
			if (rc == 0)
				return 0;
			if (rc == -2)
				arena_free(ctx, &r);
			err = rc == -2 ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
			goto fail;
		}
		struct _cl_event *c = vgpu_event_new(ctx, ev->queue, ev->type);
		if (c == NULL) {
			arena_free(ctx, &r);
			err = CL_OUT_OF_HOST_MEMORY;
			goto fail;
		}
		int rc = send_chunk(ev, c, &r, got);
		if (rc != 0) {
			if (c->copy_src.len == 0 && c->free1.len == 0)
				arena_free(ctx, &r);
			vgpu_event_done(c, rc == -2 ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES, NULL);
			err = rc == -2 ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
			goto fail;
		}
		c->parent = ev;
		IREF(ev);
		c->chunk_next = ev->chunks;
		ev->chunks = c;
		if (ev->hm != NULL) {
			c->hm = ev->hm;
			c->hm->refs++;
		}
		c->sent = 1;
		c->status = CL_SUBMITTED;
		pending_add(ctx, c);
	}
	return 0;
fail:
	/* What was sent completes first (a read's chunks copy out). */
	wait_chunks(ev);
	vgpu_event_done(ev, err, NULL);
	return -1;
}

/* send_now sends a ready command. */
static void send_now(struct _cl_event *ev)
{
	cl_context ctx = ev->ctx;
	if (ev->xfer != NULL && send_xfer(ev) != 0)
		return;
	/* The message may be several requests (a rectangle's rows). */
	for (size_t off = 0; off < ev->msg_len;) {
		struct vgpu_icdp_header *h = (void *)(ev->msg + off);
		if (conn_send(ctx, h, h->len) != 0) {
			vgpu_event_done(ev, CL_OUT_OF_RESOURCES, NULL);
			return;
		}
		off += h->len;
	}
	/* Chunks whose requests were in the message (a printing launch's,
	 * kernel.c) are in flight now, before ev. */
	for (struct _cl_event *c = ev->chunks; c != NULL; c = c->chunk_next) {
		if (!c->sent) {
			c->sent = 1;
			c->status = CL_SUBMITTED;
			pending_add(ctx, c);
		}
	}
	ev->sent = 1;
	ev->status = CL_SUBMITTED;
	free(ev->msg);
	ev->msg = NULL;
	drop_refs(ev);
	pending_add(ctx, ev);
	fire_callbacks(ev);
	pthread_cond_broadcast(&ctx->cv);

	/* Keep the events in flight under the daemon's limit, and collect
	 * completions now and then so that arena ranges come back. */
	if (ctx->npending >= PENDING_MAX) {
		struct _cl_event *evs[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < VGPU_ICDP_MAX_WAIT_EVENTS; e = e->pnext)
			evs[k++] = e;
		vgpu_ask(ctx, VGPU_ICDP_OP_WAIT, k, evs);
	} else if (ctx->npending >= PENDING_HIGH || ++ctx->sends_since_poll >= POLL_EVERY) {
		ctx->sends_since_poll = 0;
		struct _cl_event *evs[256];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < 256; e = e->pnext)
			evs[k++] = e;
		vgpu_ask(ctx, VGPU_ICDP_OP_POLL, k, evs);
	}
}

/* ready: 1 when ev may be sent, 0 when it must wait, -1 when an event it
 * waits for failed. */
static int ready(const struct _cl_event *ev)
{
	for (cl_uint i = 0; i < ev->nwait; i++) {
		const struct _cl_event *w = ev->wait[i];
		if (w->status < 0)
			return -1;
		if (w->status != CL_COMPLETE && !w->sent)
			return 0;
	}
	return 1;
}

void vgpu_release_held(cl_context ctx)
{
	int progress = 1;
	while (progress) {
		progress = 0;
		for (cl_command_queue q = ctx->queues; q != NULL; q = q->next) {
			while (q->held_head != NULL) {
				struct _cl_event *ev = q->held_head;
				int r = ready(ev);
				if (r == 0)
					break;
				q->held_head = ev->held_next;
				if (q->held_head == NULL)
					q->held_tail = NULL;
				ev->held_next = NULL;
				progress = 1;
				if (r < 0)
					vgpu_event_done(ev, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, NULL);
				else
					send_now(ev);
			}
		}
	}
}

void vgpu_fail_all(cl_context ctx)
{
	for (cl_command_queue q = ctx->queues; q != NULL; q = q->next) {
		while (q->held_head != NULL) {
			struct _cl_event *ev = q->held_head;
			q->held_head = ev->held_next;
			if (q->held_head == NULL)
				q->held_tail = NULL;
			ev->held_next = NULL;
			vgpu_event_done(ev, CL_OUT_OF_RESOURCES, NULL);
		}
	}
	while (ctx->pend_head != NULL)
		vgpu_event_done(ctx->pend_head, CL_OUT_OF_RESOURCES, NULL);
	pthread_cond_broadcast(&ctx->cv);
}

cl_int vgpu_check_wait_list(cl_context ctx, cl_uint n, const cl_event *list)
{
	if ((n == 0) != (list == NULL))
		return CL_INVALID_EVENT_WAIT_LIST;
	for (cl_uint i = 0; i < n; i++) {
		struct _cl_event *e = GET(list[i], VGPU_EVENT);
		if (e == NULL)
			return CL_INVALID_EVENT_WAIT_LIST;
		int other = e->ctx != ctx;
		PUT(e);
		if (other)
			return CL_INVALID_CONTEXT;
	}
	return CL_SUCCESS;
}

static void flush_if_needed(cl_context ctx)
{
	if (!ctx->need_flush || !conn_ok(ctx))
		return;
	struct vgpu_icdp_header h;
	conn_hdr(ctx, &h, VGPU_ICDP_OP_FLUSH, sizeof h);
	if (conn_send(ctx, &h, sizeof h) == 0)
		ctx->need_flush = 0;
}

int vgpu_ask(cl_context ctx, uint16_t op, cl_uint n, struct _cl_event *const *evs)
{
	if (!conn_ok(ctx))
		return -1;
	size_t len = sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_wait_head) + 8 * (size_t)n;
	uint8_t *msg = malloc(len);
	if (msg == NULL)
		return -1;
	struct vgpu_icdp_wait_head *wh = (void *)(msg + sizeof(struct vgpu_icdp_header));
	uint64_t *ids = (void *)(wh + 1);
	cl_uint k = 0;
	for (cl_uint i = 0; i < n && k < VGPU_ICDP_MAX_WAIT_EVENTS; i++)
		if (evs[i]->sent && evs[i]->status > CL_COMPLETE)
			ids[k++] = evs[i]->id;
	if (k == 0) {
		free(msg);
		return 0;
	}
	len = sizeof(struct vgpu_icdp_header) + sizeof *wh + 8 * (size_t)k;
	wh->count = k;
	wh->reserved = 0;
	flush_if_needed(ctx);
	conn_hdr(ctx, msg, op, len);
	long rn = conn_call(ctx, msg, len, ctx->rbuf, VGPU_ICDP_MAX_MESSAGE);
	free(msg);
	if (rn < 0)
		return -1;
	/* conn_call copied the body to the start of rbuf. */
	const struct vgpu_icdp_wait_reply_head *rh = (const void *)ctx->rbuf;
	const struct vgpu_icdp_event_record *rec = (const void *)(rh + 1);
	if ((size_t)rn < sizeof *rh || rh->count > ((size_t)rn - sizeof *rh) / sizeof *rec) {
		conn_lost(ctx, "malformed Wait reply");
		return -1;
	}
	/* The records are copied: completing an event may reuse rbuf (a
	 * callback runs only later, but arena_free and others do not). */
	uint32_t cnt = rh->count;
	struct vgpu_icdp_event_record *recs = malloc(cnt * sizeof *recs + 1);
	if (recs == NULL)
		return -1;
	memcpy(recs, rec, cnt * sizeof *recs);
	for (uint32_t i = 0; i < cnt; i++) {
		if (recs[i].status == VGPU_ICDP_NOT_COMPLETE)
			continue;
		struct _cl_event *ev = pending_find(ctx, recs[i].event);
		if (ev == NULL)
			continue;
		cl_int st = recs[i].status == VGPU_STATUS_OK ? CL_COMPLETE : vgpu_status_error(recs[i].status, ev->type);
		vgpu_event_done(ev, st, &recs[i]);
	}
	free(recs);
	return 0;
}

cl_int vgpu_wait_events(cl_context ctx, cl_uint n, struct _cl_event *const *evs)
{
	for (;;) {
		vgpu_release_held(ctx);
		struct _cl_event *ask[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		int unsent = 0;
		for (cl_uint i = 0; i < n; i++) {
			if (evs[i]->status <= CL_COMPLETE)
				continue;
			if (!evs[i]->sent)
				unsent = 1;
			else if (k < VGPU_ICDP_MAX_WAIT_EVENTS)
				ask[k++] = evs[i];
		}
		if (k > 0) {
			if (vgpu_ask(ctx, VGPU_ICDP_OP_WAIT, k, ask) != 0 && !conn_ok(ctx))
				continue; /* everything in flight has failed now */
			continue;
		}
		if (!unsent)
			break;
		if (!conn_ok(ctx)) {
			/* A user event may still be set by another thread; a held
			 * command fails when released. */
			vgpu_release_held(ctx);
		}
		ctx_wait(ctx);
	}
	for (cl_uint i = 0; i < n; i++)
		if (evs[i]->status < 0)
			return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
	return CL_SUCCESS;
}

cl_int vgpu_submit(struct _cl_event *ev, cl_uint nwait, const cl_event *wait, int blocking, cl_event *out)
{
	cl_context ctx = ev->ctx;
	cl_command_queue q = ev->queue;
	IREF(ev); /* ours, for the rest of this call */
	if (nwait > 0) {
		ev->wait = calloc(nwait, sizeof *ev->wait);
		if (ev->wait == NULL) {
			vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
			PUT(ev);
			return CL_OUT_OF_HOST_MEMORY;
		}
		for (cl_uint i = 0; i < nwait; i++) {
			struct _cl_event *w = GET(wait[i], VGPU_EVENT);
			if (w == NULL) {
				vgpu_event_done(ev, CL_INVALID_EVENT_WAIT_LIST, NULL);
				PUT(ev);
				return CL_INVALID_EVENT_WAIT_LIST;
			}
			ev->wait[ev->nwait++] = w;
		}
	}
	int r = ready(ev);
	if (r < 0) {
		vgpu_event_done(ev, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, NULL);
	} else if (r == 0 || (q != NULL && q->held_head != NULL)) {
		if (q->held_tail != NULL)
			q->held_tail->held_next = ev;
		else
			q->held_head = ev;
		q->held_tail = ev;
	} else {
		send_now(ev);
	}
	if (out != NULL) {
		IREF(ev);
		vgpu_obj_publish(&ev->obj);
		*out = ev;
	}
	cl_int err = CL_SUCCESS;
	/* A blocking write that was sent has copied the application's bytes
	 * into the arena: the application may reuse its memory now, which is
	 * all a blocking write promises (1.2, 5.2.2), so when the application
	 * keeps no event of it the call does not wait for the device; the
	 * in-order queue still runs the write before later commands. With an
	 * event it waits, since applications read a blocking write's event
	 * (its profiling times) at once, as other implementations allow. One
	 * held back behind its wait list has not read the bytes yet, and
	 * waits. */
	int staged = out == NULL && ev->xfer != NULL && ev->xfer->write && ev->sent && ev->status >= 0;
	if (blocking && !staged) {
		struct _cl_event *one = ev;
		vgpu_wait_events(ctx, 1, &one);
		if (ev->status < 0)
			err = ev->status == CL_OUT_OF_RESOURCES || ev->status == CL_MEM_OBJECT_ALLOCATION_FAILURE
				      ? ev->status
				      : CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
	}
	PUT(ev);
	return err;
}

/* ---- The callback thread ------------------------------------------- */

static void *progress(void *arg)
{
	cl_context ctx = arg;
	unsigned nap = 50; /* microseconds */
	ctx_lock(ctx);
	for (;;) {
		if (ctx->ncallback_events == 0 || !conn_ok(ctx))
			break;
		struct _cl_event *evs[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < VGPU_ICDP_MAX_WAIT_EVENTS; e = e->pnext)
			if (e->in_progress_list)
				evs[k++] = e;
		unsigned before = ctx->ncallback_events;
		if (k > 0)
			vgpu_ask(ctx, VGPU_ICDP_OP_POLL, k, evs);
		nap = ctx->ncallback_events < before ? 50 : (nap < 2000 ? nap * 2 : 2000);
		ctx_unlock(ctx); /* runs the callbacks */
		struct timespec ts = {0, (long)nap * 1000};
		nanosleep(&ts, NULL);
		ctx_lock(ctx);
	}
	ctx->progress_running = 0;
	ctx_unlock(ctx);
	PUT(ctx);
	return NULL;
}

static void start_progress(cl_context ctx)
{
	if (ctx->progress_running)
		return;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	IREF(ctx);
	if (pthread_create(&t, &a, progress, ctx) == 0)
		ctx->progress_running = 1;
	else
		PUT(ctx); /* callbacks then run when the application next waits */
	pthread_attr_destroy(&a);
}

/* ---- Entries -------------------------------------------------------- */

cl_int CL_API_CALL vgpu_clWaitForEvents(cl_uint num_events, const cl_event *event_list)
{
	if (num_events == 0 || event_list == NULL)
		return CL_INVALID_VALUE;
	struct _cl_event **evs = calloc(num_events, sizeof *evs);
	if (evs == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	cl_int err = CL_SUCCESS;
	cl_uint got = 0;
	for (; got < num_events; got++) {
		evs[got] = GET(event_list[got], VGPU_EVENT);
		if (evs[got] == NULL) {
			err = CL_INVALID_EVENT;
			break;
		}
		if (evs[got]->ctx != evs[0]->ctx) {
			got++;
			err = CL_INVALID_CONTEXT;
			break;
		}
	}
	if (err == CL_SUCCESS) {
		cl_context ctx = evs[0]->ctx;
		ENTER(ctx);
		err = vgpu_wait_events(ctx, num_events, evs);
		for (cl_uint i = 0; i < got; i++)
			PUT(evs[i]);
		got = 0;
		LEAVE(ctx);
	}
	for (cl_uint i = 0; i < got; i++)
		PUT(evs[i]);
	free(evs);
	return err;
}

cl_int CL_API_CALL vgpu_clGetEventInfo(cl_event event, cl_event_info param_name, size_t param_value_size,
				       void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(struct _cl_event *, ev, event, VGPU_EVENT, CL_INVALID_EVENT);
	union {
		cl_command_queue q;
		cl_context c;
		cl_command_type t;
		cl_int i;
		cl_uint u;
	} v;
	size_t n;
	cl_int err = CL_SUCCESS;
	switch (param_name) {
	case CL_EVENT_COMMAND_QUEUE: v.q = ev->queue; n = sizeof v.q; break;
	case CL_EVENT_CONTEXT: v.c = ctx; n = sizeof v.c; break;
	case CL_EVENT_COMMAND_TYPE: v.t = ev->type; n = sizeof v.t; break;
	case CL_EVENT_COMMAND_EXECUTION_STATUS:
		/* An application may spin on this: make progress. */
		if (ev->status > CL_COMPLETE) {
			vgpu_release_held(ctx);
			struct _cl_event *one = ev;
			if (ev->sent)
				vgpu_ask(ctx, VGPU_ICDP_OP_POLL, 1, &one);
		}
		v.i = ev->status;
		n = sizeof v.i;
		break;
	case CL_EVENT_REFERENCE_COUNT: v.u = vgpu_obj_refs(&ev->obj); n = sizeof v.u; break;
	default: err = CL_INVALID_VALUE; n = 0; break;
	}
	if (err == CL_SUCCESS)
		err = vgpu_info(&v, n, param_value_size, param_value, param_value_size_ret);
	PUT(ev);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clRetainEvent(cl_event event)
{
	return vgpu_retain(event, VGPU_EVENT, CL_INVALID_EVENT);
}

cl_int CL_API_CALL vgpu_clReleaseEvent(cl_event event)
{
	return vgpu_release(event, VGPU_EVENT, CL_INVALID_EVENT, vgpu_put);
}

cl_int CL_API_CALL vgpu_clGetEventProfilingInfo(cl_event event, cl_profiling_info param_name,
						size_t param_value_size, void *param_value,
						size_t *param_value_size_ret)
{
	ENTER_OBJ(struct _cl_event *, ev, event, VGPU_EVENT, CL_INVALID_EVENT);
	cl_int err = CL_SUCCESS;
	cl_ulong t = 0;
	if (ev->queue == NULL || (ev->queue->props & CL_QUEUE_PROFILING_ENABLE) == 0 || ev->status != CL_COMPLETE) {
		err = CL_PROFILING_INFO_NOT_AVAILABLE;
	} else {
		switch (param_name) {
		case CL_PROFILING_COMMAND_QUEUED: t = ev->t_queued; break;
		case CL_PROFILING_COMMAND_SUBMIT: t = ev->t_submit; break;
		case CL_PROFILING_COMMAND_START: t = ev->t_start; break;
		case CL_PROFILING_COMMAND_END:
		case CL_PROFILING_COMMAND_COMPLETE: /* no child kernels: the end */ t = ev->t_end; break;
		default: err = CL_INVALID_VALUE; break;
		}
	}
	if (err == CL_SUCCESS)
		err = vgpu_info(&t, sizeof t, param_value_size, param_value, param_value_size_ret);
	PUT(ev);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clSetEventCallback(cl_event event, cl_int type,
					   void(CL_CALLBACK *fn)(cl_event, cl_int, void *), void *user_data)
{
	struct _cl_event *ev = GET(event, VGPU_EVENT);
	if (ev == NULL)
		return CL_INVALID_EVENT;
	if (fn == NULL || (type != CL_SUBMITTED && type != CL_RUNNING && type != CL_COMPLETE)) {
		PUT(ev);
		return CL_INVALID_VALUE;
	}
	cl_context ctx = ev->ctx;
	ENTER(ctx);
	cl_int err = CL_SUCCESS;
	struct vgpu_evcb *cb = calloc(1, sizeof *cb);
	if (cb == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
	} else {
		cb->type = type;
		cb->fn = fn;
		cb->data = user_data;
		cb->next = ev->cbs;
		ev->cbs = cb;
		fire_callbacks(ev); /* at once when the status is reached already */
		if (ev->cbs != NULL && !ev->in_progress_list && ev->queue != NULL) {
			ev->in_progress_list = 1;
			ctx->ncallback_events++;
			start_progress(ctx);
		}
	}
	PUT(ev);
	LEAVE(ctx);
	return err;
}

cl_event CL_API_CALL vgpu_clCreateUserEvent(cl_context context, cl_int *errcode_ret)
{
	cl_context ctx = GET(context, VGPU_CONTEXT);
	cl_int err = CL_SUCCESS;
	struct _cl_event *ev = NULL;
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
	} else {
		ctx_lock(ctx);
		ev = vgpu_event_new(ctx, NULL, CL_COMMAND_USER);
		if (ev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			ev->status = CL_SUBMITTED;
			IREF(ev); /* the application's; the other is the "command's", until set */
			vgpu_obj_publish(&ev->obj);
		}
		ctx_unlock(ctx);
		PUT(ctx);
	}
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return ev;
}

cl_int CL_API_CALL vgpu_clSetUserEventStatus(cl_event event, cl_int execution_status)
{
	struct _cl_event *ev = GET(event, VGPU_EVENT);
	if (ev == NULL)
		return CL_INVALID_EVENT;
	if (ev->type != CL_COMMAND_USER) {
		PUT(ev);
		return CL_INVALID_EVENT;
	}
	if (execution_status > CL_COMPLETE) {
		PUT(ev);
		return CL_INVALID_VALUE;
	}
	cl_context ctx = ev->ctx;
	ENTER(ctx);
	cl_int err = CL_SUCCESS;
	if (ev->status <= CL_COMPLETE) {
		err = CL_INVALID_OPERATION;
	} else {
		vgpu_event_done(ev, execution_status, NULL);
		vgpu_release_held(ctx);
	}
	PUT(ev);
	LEAVE(ctx);
	return err;
}

/* A marker: a Marker request, which completes when everything before it
 * on the connection has. */
static cl_int marker(cl_command_queue queue, cl_command_type type, cl_uint nwait, const cl_event *wait,
		     cl_event *event)
{
	ENTER_OBJ(cl_command_queue, q, queue, VGPU_QUEUE, CL_INVALID_COMMAND_QUEUE);
	cl_int err = vgpu_check_wait_list(ctx, nwait, wait);
	if (err == CL_SUCCESS && !conn_ok(ctx))
		err = CL_OUT_OF_RESOURCES;
	struct _cl_event *ev = NULL;
	if (err == CL_SUCCESS && (ev = vgpu_event_new(ctx, q, type)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	if (err == CL_SUCCESS) {
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_marker b;
		} *m = calloc(1, sizeof *m);
		if (m == NULL) {
			vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			conn_hdr(ctx, m, VGPU_ICDP_OP_MARKER, sizeof *m);
			m->b.event = ev->id;
			ev->msg = (uint8_t *)m;
			ev->msg_len = sizeof *m;
			err = vgpu_submit(ev, nwait, wait, 0, event);
		}
	}
	PUT(q);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clEnqueueMarkerWithWaitList(cl_command_queue queue, cl_uint num_events,
						   const cl_event *wait_list, cl_event *event)
{
	return marker(queue, CL_COMMAND_MARKER, num_events, wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueBarrierWithWaitList(cl_command_queue queue, cl_uint num_events,
						    const cl_event *wait_list, cl_event *event)
{
	return marker(queue, CL_COMMAND_BARRIER, num_events, wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueMarker(cl_command_queue queue, cl_event *event)
{
	if (GET(queue, VGPU_QUEUE) == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	PUT((cl_command_queue)queue);
	if (event == NULL)
		return CL_INVALID_VALUE;
	return marker(queue, CL_COMMAND_MARKER, 0, NULL, event);
}

cl_int CL_API_CALL vgpu_clEnqueueWaitForEvents(cl_command_queue queue, cl_uint num_events,
					       const cl_event *event_list)
{
	if (GET(queue, VGPU_QUEUE) == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	PUT((cl_command_queue)queue);
	if (num_events == 0 || event_list == NULL)
		return CL_INVALID_VALUE;
	for (cl_uint i = 0; i < num_events; i++) {
		struct _cl_event *e = GET(event_list[i], VGPU_EVENT);
		if (e == NULL)
			return CL_INVALID_EVENT;
		PUT(e);
	}
	/* Later commands of the queue wait behind a marker that waits for
	 * the list; the queue is in order. */
	cl_int err = marker(queue, CL_COMMAND_BARRIER, num_events, event_list, NULL);
	return err == CL_INVALID_EVENT_WAIT_LIST ? CL_INVALID_EVENT : err;
}

cl_int CL_API_CALL vgpu_clEnqueueBarrier(cl_command_queue queue)
{
	/* Every queue is in order: a barrier without a wait list orders
	 * nothing that is not ordered already. */
	cl_command_queue q = GET(queue, VGPU_QUEUE);
	if (q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	PUT(q);
	return CL_SUCCESS;
}
