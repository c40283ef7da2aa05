/*
 * sql92: RocketMQ 4.9.8's SQL92 property filter (filter module:
 * SelectorParser.jj and the expression classes), compiled once into a
 * node array and evaluated per message over its properties.
 *
 * GRAMMAR (SelectorParser.jj): OR / AND / NOT, = <> > >= < <=,
 * [NOT] BETWEEN x AND y, [NOT] IN ('s', ...), IS [NOT] NULL, unary + -,
 * parentheses, literals 'str' ('' escapes a quote), decimals (Integer,
 * or Long past int range, optional L), floats (Double), TRUE FALSE NULL,
 * identifiers [A-Za-z_$][A-Za-z0-9_$]* naming properties (TAGS is the
 * TAGS property), -- line and block comments.  Keywords ignore case,
 * names do not.
 *
 * SEMANTICS: Java's, with its compile-time checks (a string or boolean
 * operand of < > is refused, '= NULL' is refused, a constant BETWEEN
 * whose bounds are reversed is refused, IN needs a property on the
 * left) and its three-valued evaluation: a missing property is NULL, a
 * comparison with NULL is NULL, AND / OR / NOT follow SQL's truth
 * tables, a message matches only when the whole expression is TRUE.
 * Property values are strings; comparing one with a number converts it
 * as Java does (Integer.valueOf, Long.valueOf, Double.valueOf, per the
 * constant's type); a conversion that throws in Java makes the whole
 * expression not match (ExpressionMessageFilter catches the exception).
 *
 * LIMITS: the text length, the nodes and the tree height are bounded by
 * the caller (conf keys), so evaluation recursion is bounded too.
 *
 * MT: a compiled filter is immutable: evaluate it from any thread.
 */
#ifndef RMQ_SQL92_H
#define RMQ_SQL92_H

#include <stdbool.h>
#include <stddef.h>

struct sql92;

struct sql92_limits {
    size_t max_len;             /* bytes of expression text */
    int max_depth;              /* tree height (nesting, AND/OR chains) */
    int max_nodes;
};

/**
 * Compiles an expression.  NULL on error, with the reason in err as a
 * 4.9.8 broker words it (the exception's toString(): its class name,
 * then its message).
 */
struct sql92 *sql92_compile(const char *text, size_t len,
                            const struct sql92_limits *lim, char *err,
                            size_t errlen);

void sql92_free(struct sql92 *f);

/**
 * A property's value: true with *v / *vlen set, false when the message
 * has no such property.
 */
typedef bool (*sql92_get_fn)(void *ud, const char *name, size_t nlen,
                             const char **v, size_t *vlen);

/** The three-valued result of an evaluation. */
enum sql92_result { SQL92_FALSE = 0, SQL92_TRUE = 1, SQL92_NULL = 2, SQL92_ERROR = 3 };

/** Evaluates f over one message's properties. */
enum sql92_result sql92_eval(const struct sql92 *f, sql92_get_fn get, void *ud);

/** True when the message matches (the result is TRUE). */
bool sql92_match(const struct sql92 *f, sql92_get_fn get, void *ud);

/** sql92_eval() over a properties string (store/props.h format). */
enum sql92_result sql92_eval_props(const struct sql92 *f, const char *props, size_t n);

/**
 * sql92_match() over a properties string (store/props.h format).
 */
bool sql92_match_props(const struct sql92 *f, const char *props, size_t n);

/** Number of nodes (for tests and the log). */
int sql92_nodes(const struct sql92 *f);

#endif
