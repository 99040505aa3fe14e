/* What other parts of libsonde do with a view beyond include/sonde/view.h: move stacks from
 * one view into another, so that a view that lives long (a live view's window) can start
 * afresh with only what its events still hold. Internal to libsonde.
 */
#ifndef SONDE_VIEW_VIEW_H
#define SONDE_VIEW_VIEW_H

#include <stdint.h>

#include <sonde/view.h>

/* How many function ids `v` has given: its ids are below it. */
uint32_t sonde__view_func_ids(const struct sonde_view *v);

/* The id in `to` of function `id` of `from`, interned there with its name, module and
 * unresolved mark. map (sonde__view_func_ids(from) entries, zeroed by the caller) keeps
 * the ids copied, so that each function is interned once. -errno (-EINVAL: an unknown
 * id). */
int64_t sonde__view_copy_func(struct sonde_view *to, const struct sonde_view *from, uint32_t id,
			      uint32_t *map);

/* The id in `to` of stack `stack` of `from` (0 for the empty stack), its functions copied
 * as sonde__view_copy_func copies them. -errno. */
int64_t sonde__view_copy_stack(struct sonde_view *to, const struct sonde_view *from,
			       uint32_t stack, uint32_t *map);

#endif
