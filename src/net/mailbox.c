/* mailbox: see mailbox.h. */
#include "net/mailbox.h"

static void
drain(struct mailbox *mb)
{
    struct qnode batch;
    q_init(&batch);
    uv_mutex_lock(&mb->lock);
    if (!q_empty(&mb->items)) {
        /* Splice the whole queue into `batch`. */
        batch.next = mb->items.next;
        batch.prev = mb->items.prev;
        batch.next->prev = &batch;
        batch.prev->next = &batch;
        q_init(&mb->items);
    }
    uv_mutex_unlock(&mb->lock);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &batch) {
        struct mail *m = container_of(pos, struct mail, link);
        q_remove(pos);
        m->fn(m, mb->owner);
    }
}

static void
on_async(uv_async_t *a)
{
    drain(a->data);
}

int
mailbox_init(struct mailbox *mb, uv_loop_t *loop, void *owner)
{
    q_init(&mb->items);
    mb->owner = owner;
    mb->closed = false;
    int rc = uv_mutex_init(&mb->lock);
    if (rc != 0)
        return rc;
    rc = uv_async_init(loop, &mb->async, on_async);
    if (rc != 0) {
        uv_mutex_destroy(&mb->lock);
        return rc;
    }
    mb->async.data = mb;
    uv_unref((uv_handle_t *)&mb->async);
    return 0;
}

int
mailbox_post(struct mailbox *mb, struct mail *m)
{
    uv_mutex_lock(&mb->lock);
    if (mb->closed) {
        uv_mutex_unlock(&mb->lock);
        return -1;
    }
    q_insert_tail(&mb->items, &m->link);
    uv_mutex_unlock(&mb->lock);
    uv_async_send(&mb->async);
    return 0;
}

static void
on_closed(uv_handle_t *h)
{
    struct mailbox *mb = h->data;
    uv_mutex_destroy(&mb->lock);
}

void
mailbox_close(struct mailbox *mb)
{
    uv_mutex_lock(&mb->lock);
    mb->closed = true;
    uv_mutex_unlock(&mb->lock);
    drain(mb);
    uv_close((uv_handle_t *)&mb->async, on_closed);
}
