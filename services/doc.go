// Package services is the module of the lifecycle stages (one package
// each: api, admission, persistence, scheduler, status, endpoints) and the
// libraries they share (stage, objects, informer, auth, validate, events,
// manifest, pipeline). Its test keeps the layering: no stage imports another.
package services
