/**
 * OpenAI error bodies: `{error:{message,type,param,code}}` with the HTTP
 * status that goes with them.
 *
 * @module
 */

/** A request the server refuses, with its status and OpenAI error fields. */
export class ApiError extends Error {
  /** HTTP status. */
  readonly status: number;
  /** OpenAI's `type` (invalid_request_error, authentication_error, …). */
  readonly type: string;
  /** The request field at fault, or null. */
  readonly param: string | null;
  /** A short machine-readable code, or null. */
  readonly code: string | null;
  /** Extra response headers (Allow, Retry-After). */
  readonly headers: Record<string, string>;

  /** An error answered with `status`. */
  constructor(
    status: number,
    message: string,
    o: {
      type?: string;
      param?: string | null;
      code?: string | null;
      headers?: Record<string, string>;
    } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = o.type ?? (status >= 500 ? "server_error" : "invalid_request_error");
    this.param = o.param ?? null;
    this.code = o.code ?? null;
    this.headers = o.headers ?? {};
  }
}

/** A 400 naming the field `param`. */
export function badField(param: string, message: string, code = "invalid_value"): ApiError {
  return new ApiError(400, `${param}: ${message}`, { param, code });
}

/** The JSON response for `e`. */
export function errorResponse(e: ApiError): Response {
  return Response.json(
    { error: { message: e.message, type: e.type, param: e.param, code: e.code } },
    { status: e.status, headers: e.headers },
  );
}
